#include "ltrain/distributed/gradients.h"

#include <torch/torch.h>

#include <map>

namespace ltrain::distributed {

torch::Tensor sumOfSquares(const torch::Tensor& g) {
  return at::linalg_vector_norm(g, 2, c10::nullopt, false, torch::kDouble).square();
}

torch::Tensor unscaleAndFindInf(const std::vector<torch::Tensor>& grads, double factor) {
  torch::NoGradGuard no_grad;
  if (grads.empty()) return torch::zeros({1});
  // ATen's fused check wants the tensors, found_inf and the factor on one device (and float
  // types): one call per device.
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> by_device;
  for (const auto& g : grads)
    by_device[{static_cast<int>(g.device().type()), g.device().index()}].push_back(g);
  const auto home = grads.front().device();
  auto found = torch::zeros({1}, torch::TensorOptions().device(home));
  for (auto& [where, ts] : by_device) {
    const auto dev = ts.front().device();
    auto found_here = torch::zeros({1}, torch::TensorOptions().device(dev));
    auto inv = torch::full({1}, factor, torch::TensorOptions().device(dev));
    at::_amp_foreach_non_finite_check_and_unscale_(ts, found_here, inv);
    found = torch::maximum(found, found_here.to(home));
  }
  return found;
}

double globalNorm(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  if (grads.empty()) return 0.0;
  const auto home = grads.front().device();
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(home));
  for (const auto& g : grads) sum += sumOfSquares(g).to(home);
  return std::sqrt(sum.item<double>());
}

void clipToNorm(const std::vector<torch::Tensor>& grads, double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  torch::NoGradGuard no_grad;
  for (const auto& g : grads) const_cast<torch::Tensor&>(g).mul_(coef);
}

}  // namespace ltrain::distributed
