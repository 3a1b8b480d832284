#include "ltrain/train/grad_scaler.h"

#include <torch/torch.h>

namespace ltrain::train {

bool GradScaler::unscaleAndUpdate(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // One reduction for all gradients: the finiteness test is a single sync, not one per tensor.
  // Flags gathered on one device: a pipeline's stages keep their gradients on several.
  std::vector<torch::Tensor> flags;
  torch::Device at(torch::kCPU);
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    auto& g = const_cast<torch::Tensor&>(p.grad());
    g.mul_(inv);
    if (flags.empty()) at = g.device();
    flags.push_back(torch::isfinite(g).all().to(at));
  }
  const bool finite = flags.empty() || torch::stack(flags).all().item<bool>();
  if (!finite) {
    scale_ *= backoff_;
    tracker_ = 0;
  } else if (++tracker_ >= interval_) {
    scale_ *= growth_;
    tracker_ = 0;
  }
  return finite;
}

}  // namespace ltrain::train
