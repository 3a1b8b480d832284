#include "ltrain/checkpoint/checkpointing.h"

#include <exception>
#include <map>
#include <memory>
#include <string>

#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/io/safetensors.h"

namespace ltrain::checkpoint {

// model.safetensors of a dist.zero 3 run, written on the main rank as the units come, one at a
// time: the whole model is never in one place. A failed write does not leave the gathers early
// (the others are still in them); once every unit went by, every rank learns of it and raises it,
// so that no rank goes on into the next step alone.
void Checkpointer::saveWeightsStreaming(models::Classifier& model, distributed::GradientSync& sync,
                                        const std::vector<distributed::UnitShard>& units,
                                        int64_t step) {
  std::unique_ptr<io::SafetensorsStream> out;
  std::exception_ptr failure;
  if (main_) {
    std::vector<io::SafetensorsStream::Entry> entries;
    for (const auto& u : units)
      for (const auto& p : u.params) entries.push_back({p.name, u.values.scalar_type(), p.shape});
    for (const auto& b : model->named_buffers())
      entries.push_back({b.key(), b.value().scalar_type(), b.value().sizes().vec()});
    try {
      out = std::make_unique<io::SafetensorsStream>(
          run_dir_ + "/model.safetensors", entries,
          std::map<std::string, std::string>{{"step", std::to_string(step)}, {"format", "pt"}});
    } catch (...) {
      failure = std::current_exception();
    }
  }
  sync.forEachUnitOnHost(main_, [&](size_t, const std::vector<torch::Tensor>& params) {
    if (failure || !out) return;
    try {
      for (const auto& p : params) out->write(p);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (main_ && !failure) {
    try {
      for (const auto& b : model->named_buffers()) out->write(b.value());
      out->commit();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const bool failed = sharded_pg_->allreduceSum({failure ? 1.0 : 0.0})[0] > 0;
  if (failure) std::rethrow_exception(failure);
  if (failed)
    throw std::runtime_error("rank 0 could not write " + run_dir_ +
                             "/model.safetensors (its log says why)");
}

std::string Checkpointer::pathFor(int64_t step) const {
  return sharded_pg_ ? shardedCheckpointPath(run_dir_ + "/checkpoints", step)
                     : checkpointPath(run_dir_ + "/checkpoints", step);
}

void Checkpointer::save(models::Classifier& model, distributed::GradientSync& sync,
                        const LoopState& state) {
  if (sharded_pg_) {
    // Every rank its own part, at once; then the weights for Python, one unit at a time.
    const auto units = sync.unitShards();
    saveShardedCheckpoint(pathFor(state.step), units, *model, state, device_, *sharded_pg_);
    if (main_) pruneCheckpoints(run_dir_ + "/checkpoints", keep_);
    saveWeightsStreaming(model, sync, units, state.step);
    return;
  }
  sync.withWholeOptimizer([&](torch::optim::Optimizer& whole) {
    if (!main_) return;
    saveCheckpoint(pathFor(state.step), *model, whole, state, device_);
    pruneCheckpoints(run_dir_ + "/checkpoints", keep_);
    // The newest weights, readable by Python (safetensors or torch) under PyTorch's names.
    io::saveSafetensors(run_dir_ + "/model.safetensors", io::moduleState(*model),
                        {{"step", std::to_string(state.step)}, {"format", "pt"}});
  });
}

}  // namespace ltrain::checkpoint
