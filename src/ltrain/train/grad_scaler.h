// Dynamic loss scaling for fp16, as torch.amp.GradScaler does it: the loss is multiplied by the
// scale, the gradients unscaled before clipping and the step (ParallelPlan::finishGradients), a
// step with inf/nan gradients skipped and the scale halved, doubled after `growth_interval` good
// steps in a row. The scale lives on the loss's device and is updated there (torch.amp's
// _amp_update_scale_), so that no step waits for the host.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "ltrain/common/stateful.h"

namespace ltrain::train {

// Its checkpoint state: loss_scale (0 when fp16 is off) and scale_growth_tracker.
class GradScaler final : public Stateful {
 public:
  explicit GradScaler(bool enabled, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000);

  bool enabled() const { return enabled_; }
  // Moves the scale next to the loss, once, before the first step.
  void to(torch::Device device);
  // The scale and its inverse, 1-element float tensors on the device.
  const torch::Tensor& scaleTensor() const { return scale_; }
  torch::Tensor inverse() const { return scale_.reciprocal(); }
  // After the gradients were unscaled and checked (`found_inf` from the plan's finishGradients).
  void update(const torch::Tensor& found_inf);

  // Read on the host: for logs and checkpoints.
  double scale() const;
  int64_t growthTracker() const;
  void restore(double scale, int64_t tracker);

  StateDict state() const override;
  void check(const StateDict& s) const override;
  // A scale of 0 (a run without fp16) leaves the initial scale.
  void load(const StateDict& s) override;

 private:
  bool enabled_;
  double growth_, backoff_;
  int64_t interval_;
  torch::Tensor scale_;    // float32 [1]
  torch::Tensor tracker_;  // int32 [1]: good steps in a row
};

}  // namespace ltrain::train
