// Checkpoints during training: rank 0 writes the loop state with the model and the whole
// optimizer state (gathered from ZeRO-1/2, so every rank takes part); under dist.zero 3 every
// rank writes its own part instead (sharded_checkpoint.h). Rank 0 keeps the newest
// train.keep_checkpoints and refreshes model.safetensors, the weights Python reads.
#pragma once
#include <torch/types.h>

#include <string>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/distributed/gradient_sync.h"
#include "ltrain/models/model.h"

namespace ltrain::checkpoint {

class Checkpointer {
 public:
  // `sharded_pg`: the process group of a dist.zero 3 run, whose checkpoints are sharded; else null.
  Checkpointer(std::string run_dir, int64_t keep, bool main_rank, torch::Device device,
               distributed::ProcessGroup* sharded_pg = nullptr)
      : run_dir_(std::move(run_dir)),
        keep_(keep),
        main_(main_rank),
        device_(device),
        sharded_pg_(sharded_pg) {}
  // Collective: every rank calls it after the same step.
  void save(models::Classifier& model, distributed::GradientSync& sync, const LoopState& state);
  std::string pathFor(int64_t step) const;

 private:
  void saveWeightsStreaming(models::Classifier& model, distributed::GradientSync& sync,
                            const std::vector<distributed::UnitShard>& units, int64_t step);
  std::string run_dir_;
  int64_t keep_;
  bool main_;
  torch::Device device_;
  distributed::ProcessGroup* sharded_pg_;
};

}  // namespace ltrain::checkpoint
