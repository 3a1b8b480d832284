// Checkpoints during training: rank 0 writes the loop state with the model and the whole
// optimizer state (gathered from a sharded strategy, so every rank takes part), keeps the newest
// train.keep_checkpoints and refreshes model.safetensors, the weights Python reads.
#pragma once
#include <torch/types.h>

#include <string>

#include "ltrain/distributed/gradient_sync.h"
#include "ltrain/models/model.h"
#include "ltrain/train/checkpoint.h"

namespace ltrain::train {

class Checkpointer {
 public:
  Checkpointer(std::string run_dir, int64_t keep, bool main_rank, torch::Device device)
      : run_dir_(std::move(run_dir)), keep_(keep), main_(main_rank), device_(device) {}
  // Collective: every rank calls it after the same step.
  void save(models::Classifier& model, distributed::GradientSync& sync, const LoopState& state);
  std::string pathFor(int64_t step) const {
    return checkpointPath(run_dir_ + "/checkpoints", step);
  }

 private:
  std::string run_dir_;
  int64_t keep_;
  bool main_;
  torch::Device device_;
};

}  // namespace ltrain::train
