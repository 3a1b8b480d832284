// Checkpoints during training, whatever strategy spread the model: rank 0 writes the run's
// stateful components with the model and the plan's whole optimizer state (gathered where it is
// sharded, so every rank takes part); where the plan keeps the parameters sharded (its state has
// unit shards) every rank writes its own part instead (sharded_checkpoint.h). Rank 0 keeps the
// newest train.keep_checkpoints and refreshes model.safetensors, the weights Python reads.
#pragma once
#include <torch/types.h>

#include <exception>
#include <functional>
#include <string>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/checkpoint/plan_state.h"
#include "ltrain/models/model.h"

namespace ltrain::distributed {
class ProcessGroup;
}

namespace ltrain::checkpoint {

class Checkpointer {
 public:
  // `pg`: the run's process group (null: one process).
  Checkpointer(std::string run_dir, int64_t keep, bool main_rank,
               distributed::ProcessGroup* pg = nullptr)
      : run_dir_(std::move(run_dir)), keep_(keep), main_(main_rank), pg_(pg) {}
  // Collective: every rank calls it after step `step`, with the same components.
  void save(models::Classifier& model, PlanState& plan, int64_t step, const Components& parts);
  // The checkpoint the last save wrote.
  const std::string& lastSaved() const { return last_saved_; }
  // Test hook (train/faults.h's SAVE): runs on the writing rank just before a whole checkpoint
  // is written; what it throws fails the save as a full disk would.
  void beforeWrite(std::function<void(int64_t step)> hook) { before_write_ = std::move(hook); }

 private:
  void saveWeightsStreaming(models::Classifier& model, PlanState& plan,
                            const std::vector<UnitShard>& units, int64_t step);
  void raiseEverywhere(const std::exception_ptr& failure, const std::string& what);
  std::string run_dir_;
  int64_t keep_;
  bool main_;
  distributed::ProcessGroup* pg_;
  std::string last_saved_;
  std::function<void(int64_t)> before_write_;
};

}  // namespace ltrain::checkpoint
