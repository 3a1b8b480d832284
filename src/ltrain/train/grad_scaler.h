// Dynamic loss scaling for fp16, as torch.amp.GradScaler does it: the loss is multiplied by the
// scale, the gradients unscaled before clipping and the step (GradientSync::findInf), a step with
// inf/nan gradients skipped and the scale halved, doubled after `growth_interval` good steps in a
// row. This class holds the scale and its schedule.
#pragma once
#include <cstdint>

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

  // After the gradients were unscaled (by 1/scale()) and checked: halves the scale after a step
  // with inf or nan gradients (which is then skipped), doubles it after growth_interval good
  // steps in a row.
  void update(bool finite);

 private:
  bool enabled_;
  double scale_, growth_, backoff_;
  int64_t interval_, tracker_ = 0;
};

}  // namespace ltrain::train
