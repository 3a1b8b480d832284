// Dynamic loss scaling for fp16, as torch.amp.GradScaler does it: multiply the loss by the scale,
// unscale the gradients before clipping and the step, skip the step when any gradient is inf/nan
// and halve the scale, double it after `growth_interval` good steps in a row.
#pragma once
#include <torch/types.h>

#include <vector>

namespace ltrain::train {

class GradScaler {
 public:
  explicit GradScaler(bool enabled, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000)
      : enabled_(enabled),
        scale_(init_scale),
        growth_(growth_factor),
        backoff_(backoff_factor),
        interval_(growth_interval) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t growthTracker() const { return tracker_; }
  void restore(double scale, int64_t tracker) { scale_ = scale, tracker_ = tracker; }

  // Divides every gradient by the scale; returns false when any is not finite (then the optimizer
  // step must be skipped). Updates the scale either way.
  bool unscaleAndUpdate(const std::vector<torch::Tensor>& params);

 private:
  bool enabled_;
  double scale_, growth_, backoff_;
  int64_t interval_, tracker_ = 0;
};

}  // namespace ltrain::train
