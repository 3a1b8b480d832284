// Checkpoints: model parameters and buffers, optimizer state, the loop position (step, epoch,
// micro-batch within the epoch) and the RNG states (the CPU's, and the GPU's of a CUDA run), so
// that a resumed run continues exactly. Tensors are read back onto the CPU.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ltrain::checkpoint {

struct LoopState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // micro-batches of `epoch` already consumed
  int64_t samples = 0;         // training examples seen, all ranks together
  double loss_scale = 0;       // fp16's dynamic loss scale (0: not used)
  int64_t scale_growth_tracker = 0;
  int64_t skipped_steps = 0;  // steps skipped for inf/nan gradients
  double epoch_loss_sum = 0;  // the current epoch's training losses so far (for summary.json)
  int64_t epoch_loss_count = 0;
  // Positions of the epoch's example order that all ranks together took, and the world size
  // that took them: a resume on another number of processes deals out the rest of the epoch
  // (-1: not recorded, the epoch's position is batch_in_epoch of a run of the same size).
  int64_t epoch_examples = -1;
  int64_t world_size = 0;
};

// Written atomically: a crash or a full disk leaves the previous checkpoint as it was.
// `device`: the run's device, whose generator is saved too when it is a GPU.
void saveCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const LoopState& state, torch::Device device = torch::kCPU);
// Throws UsageError naming the file when it is unreadable, corrupt or from another model. The
// model and `opt` get CPU tensors: place the model and move the state afterwards.
LoopState loadCheckpoint(const std::string& path, torch::nn::Module& model,
                         torch::optim::Optimizer& opt, torch::Device device = torch::kCPU);
// The model part alone (for evaluation); UsageError naming the file when it cannot be loaded.
void loadCheckpointModel(const std::string& path, torch::nn::Module& model);
// "<dir>/step-00000042.pt" for step 42, and the newest such file in `dir`.
std::string checkpointPath(const std::string& dir, int64_t step);
std::optional<std::string> newestCheckpoint(const std::string& dir);
std::vector<std::string> checkpointsNewestFirst(const std::string& dir);
// Deletes all but the newest `keep` checkpoints in `dir` (keep 0: delete none).
void pruneCheckpoints(const std::string& dir, int64_t keep);

}  // namespace ltrain::checkpoint
