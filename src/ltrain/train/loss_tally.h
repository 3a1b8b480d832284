// The training losses and skipped steps of a run, summed where they are computed: on a GPU the
// step's loss and its inf/nan flag stay on the device and are read once per log window (and at
// checkpoints), so that no step waits for the host. A window's mean and the epoch's mean leave
// out the skipped steps' losses.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "ltrain/common/stateful.h"

namespace ltrain::train {

// Its checkpoint state: skipped_steps, epoch_loss_sum and epoch_loss_count (read from the device).
class LossTally final : public Stateful {
 public:
  explicit LossTally(torch::Device device);

  // One step's mean loss; `found_inf` its 1-element inf/nan flag, undefined when the step is
  // known on the host to have been finite (or `skipped` says it was not).
  void add(const torch::Tensor& loss, const torch::Tensor& found_inf, bool skipped, int64_t step);

  void startEpoch();
  // The window's mean loss (nan when every step was skipped); starts the next window.
  double takeWindowMean();
  // Read on the host (a synchronisation on a GPU): for logs, checkpoints and the summary.
  struct Totals {
    double epoch_sum = 0;
    int64_t epoch_count = 0, skipped = 0;
    double epochMean() const { return epoch_count ? epoch_sum / epoch_count : 0.0; }
  };
  Totals read() const;
  // The first step whose flag was set, or -1 (for train.nonfinite stop on a GPU).
  int64_t firstSkippedStep() const;

  StateDict state() const override;
  void check(const StateDict& s) const override;
  void load(const StateDict& s) override;

 private:
  torch::Tensor zeros() const;
  torch::Device device_;
  torch::Tensor window_sum_, window_count_, epoch_sum_, epoch_count_, skipped_, first_skipped_;
};

}  // namespace ltrain::train
