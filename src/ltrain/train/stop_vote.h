// The stop vote that makes every rank stop after the same step: each rank's pending signal
// (common/stop_signal.h) rides, summed over ranks, on the step's last collective (the parallel
// plan's extra scalars).
#pragma once
#include <c10/core/Event.h>
#include <torch/types.h>

#include <cstddef>
#include <memory>

namespace ltrain::train {

class StopVote {
 public:
  static constexpr size_t kScalars = 2;  // ranks with SIGTERM pending, with SIGINT pending
  // This rank's vote, written into the collective's two extra slots.
  static void fill(float* slots);

  // After each step, with the summed votes: SIGTERM if any rank voted for it, else SIGINT if any
  // did, else 0; the same on every rank. On a GPU the sums are copied to the host without
  // waiting, and the vote is read one step later (still the same step on every rank), so that
  // the step never synchronises the host.
  int afterStep(const torch::Tensor& sums);

 private:
  torch::Tensor host_;  // pinned, on CUDA
  std::unique_ptr<c10::Event> copied_;
  bool pending_copy_ = false;
};

}  // namespace ltrain::train
