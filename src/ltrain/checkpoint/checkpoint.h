// Checkpoints: the model's parameters and buffers, the optimizer state, and the run's other
// stateful components (common/stateful.h: the loop position, the loss scaler, the loss tally, the
// random generators), each written under its own names, so that a resumed run continues
// exactly. Tensors are read back onto the CPU.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "ltrain/common/stateful.h"

namespace ltrain::checkpoint {

// Where the loop stands, and with it the sampler: a resume on another number of processes deals
// out the rest of the epoch from `epoch_examples`.
struct LoopState final : Stateful {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // micro-batches of `epoch` already consumed
  int64_t samples = 0;         // training examples seen, all ranks together
  // Positions of the epoch's example order that all ranks together took, and the world size
  // that took them (-1: not recorded, the epoch's position is batch_in_epoch of a run of the
  // same size).
  int64_t epoch_examples = -1;
  int64_t world_size = 0;

  LoopState() = default;
  LoopState(int64_t step_, int64_t epoch_ = 0, int64_t batch_ = 0, int64_t samples_ = 0)
      : step(step_), epoch(epoch_), batch_in_epoch(batch_), samples(samples_) {}
  StateDict state() const override;
  // step, epoch, batch_in_epoch and samples are required.
  void check(const StateDict& s) const override;
  void load(const StateDict& s) override;
};

// The components a checkpoint holds besides the model and the optimizer; their names are
// disjoint.
using Components = std::vector<Stateful*>;

// Written atomically: a crash or a full disk leaves the previous checkpoint as it was.
void saveCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const Components& parts);
// Throws UsageError naming the file when it is unreadable, corrupt or from another model (the
// model is then as it was). The model and `opt` get CPU tensors: place the model and move the
// state afterwards.
void loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& opt,
                    const Components& parts);
// The model part alone (for evaluation); UsageError naming the file when it cannot be loaded.
void loadCheckpointModel(const std::string& path, torch::nn::Module& model);
// "<dir>/step-00000042.pt" for step 42, and the newest such file in `dir`.
std::string checkpointPath(const std::string& dir, int64_t step);
std::optional<std::string> newestCheckpoint(const std::string& dir);
std::vector<std::string> checkpointsNewestFirst(const std::string& dir);
// Deletes all but the newest `keep` checkpoints in `dir` (keep 0: delete none).
void pruneCheckpoints(const std::string& dir, int64_t keep);

}  // namespace ltrain::checkpoint
