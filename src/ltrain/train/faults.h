// Test hooks. Failure injection for the failure tests, each LTRAIN_FAULT_<WHAT>_AT_STEP=STEP[:RANK]
// (rank 0 by default) and on the first attempt only (a restarted job runs through): KILL sends
// SIGKILL to itself after that step, SIGNAL sends itself SIGTERM after it, NAN makes that step's
// loss nan, NAN_INPUT that step's inputs (so that batch norm's statistics see it too), HANG spins
// in that step's forward pass and STOP sends itself SIGSTOP there; SAVE makes the checkpoint saved
// after that step fail to write (as a full disk would) on the rank that writes it; DRIFT moves
// that rank's parameters after that step (each one's first element by 1e-3), as a replica that
// went its own way.
// LTRAIN_TRACE_INDICES=DIR: each rank appends the example indices of every step to
// DIR/rank<R>.txt ("<epoch> <index>..." a line), for the tests of resuming on another world size.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ltrain/distributed/runtime.h"

namespace ltrain::train {

class Faults {
 public:
  explicit Faults(const distributed::Runtime& rt);  // reads the environment once
  // During step `step` (1-based), before its forward: NAN_INPUT; after its loss: NAN, STOP, HANG.
  void beforeForward(int64_t step, torch::Tensor& inputs) const;
  void duringStep(int64_t step, torch::Tensor& loss) const;
  // After step `step`: KILL, SIGNAL.
  void afterStep(int64_t step) const;
  // After step `step`: DRIFT.
  void drift(int64_t step, torch::nn::Module& model) const;
  // Whether the checkpoint saved after step `step` is to fail: SAVE.
  bool failsSave(int64_t step) const { return at(kSave, step); }
  // The epoch's indices for this rank, then each step's example count: LTRAIN_TRACE_INDICES.
  void traceEpoch(int64_t epoch, const std::vector<int64_t>& indices);
  void traceStep(int64_t examples);

 private:
  std::string trace_path_;
  std::vector<int64_t> trace_indices_;
  size_t trace_next_ = 0;
  int64_t trace_epoch_ = 0;
  enum Kind { kKill, kNan, kSignal, kHang, kStop, kNanInput, kSave, kDrift, kKinds };
  bool at(Kind k, int64_t step) const;
  int64_t step_[kKinds], rank_[kKinds];
  int64_t my_rank_;
  bool armed_;
};

}  // namespace ltrain::train
