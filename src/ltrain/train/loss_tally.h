// The training losses and skipped steps of a run, summed where they are computed: on a GPU the
// step's loss and its inf/nan flag stay on the device and are read once per log window (and at
// checkpoints), so that no step waits for the host. A window's mean and the epoch's mean leave
// out the skipped steps' losses.
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace ltrain::train {

class LossTally {
 public:
  LossTally(torch::Device device, double epoch_sum, int64_t epoch_count, int64_t skipped);

  // One step's mean loss; `found_inf` its 1-element inf/nan flag, undefined when the step is
  // known on the host to have been finite (or `skipped` says it was not).
  void add(const torch::Tensor& loss, const torch::Tensor& found_inf, bool skipped, int64_t step);

  void startEpoch();
  // The window's mean loss (nan when every step was skipped); starts the next window.
  double takeWindowMean();
  // Read on the host (a synchronisation on a GPU): for logs, checkpoints and the summary.
  double epochSum() const;
  int64_t epochCount() const;
  int64_t skipped() const;
  // The first step whose flag was set, or -1 (for train.nonfinite stop on a GPU).
  int64_t firstSkippedStep() const;

 private:
  torch::Tensor zeros() const;
  torch::Device device_;
  torch::Tensor window_sum_, window_count_, epoch_sum_, epoch_count_, skipped_, first_skipped_;
};

}  // namespace ltrain::train
