#include "ltrain/train/checkpointing.h"

#include <string>

#include "ltrain/io/safetensors.h"

namespace ltrain::train {

void Checkpointer::save(models::Classifier& model, distributed::GradientSync& sync,
                        const LoopState& state) {
  sync.withWholeOptimizer([&](torch::optim::Optimizer& whole) {
    if (!main_) return;
    saveCheckpoint(pathFor(state.step), *model, whole, state, device_);
    pruneCheckpoints(run_dir_ + "/checkpoints", keep_);
    // The newest weights, readable by Python (safetensors or torch) under PyTorch's names.
    io::saveSafetensors(run_dir_ + "/model.safetensors", io::moduleState(*model),
                        {{"step", std::to_string(state.step)}, {"format", "pt"}});
  });
}

}  // namespace ltrain::train
