#include "ltrain/train/grad_scaler.h"

#include <torch/torch.h>

namespace ltrain::train {

GradScaler::GradScaler(bool enabled, double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval)
    : enabled_(enabled),
      growth_(growth_factor),
      backoff_(backoff_factor),
      interval_(growth_interval),
      scale_(torch::full({1}, init_scale, torch::kFloat)),
      tracker_(torch::zeros({1}, torch::kInt)) {}

void GradScaler::to(torch::Device device) {
  scale_ = scale_.to(device);
  tracker_ = tracker_.to(device);
}

void GradScaler::update(const torch::Tensor& found_inf) {
  at::_amp_update_scale_(scale_, tracker_, found_inf.to(scale_.device(), torch::kFloat), growth_,
                         backoff_, interval_);
}

double GradScaler::scale() const {
  return scale_.item<double>();
}

int64_t GradScaler::growthTracker() const {
  return tracker_.item<int64_t>();
}

StateDict GradScaler::state() const {
  return {{"loss_scale", stateScalar(enabled_ ? scale() : 0.0)},
          {"scale_growth_tracker", stateScalar(growthTracker())}};
}

void GradScaler::check(const StateDict& s) const {
  stateDouble(s, "loss_scale", 0), stateInt(s, "scale_growth_tracker", 0);  // one number each
}

void GradScaler::load(const StateDict& s) {
  const double scale = stateDouble(s, "loss_scale", 0);
  if (enabled_ && scale > 0) restore(scale, stateInt(s, "scale_growth_tracker", 0));
}

void GradScaler::restore(double scale, int64_t tracker) {
  scale_.fill_(scale);
  tracker_.fill_(tracker);
}

}  // namespace ltrain::train
