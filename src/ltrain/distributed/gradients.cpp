#include "ltrain/distributed/gradients.h"

#include <torch/torch.h>

#include <map>
#include <set>

namespace ltrain::distributed {

torch::Tensor sumOfSquares(const torch::Tensor& g) {
  return at::linalg_vector_norm(g, 2, c10::nullopt, false, torch::kDouble).square();
}

torch::Tensor unscaleAndFindInf(const std::vector<torch::Tensor>& grads,
                                const torch::Tensor& factor) {
  torch::NoGradGuard no_grad;
  if (grads.empty()) return torch::zeros({1});
  // ATen's fused check wants the tensors, found_inf and the factor on one device: one call per
  // device.
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> by_device;
  for (const auto& g : grads)
    by_device[{static_cast<int>(g.device().type()), g.device().index()}].push_back(g);
  const auto home = grads.front().device();
  auto found = torch::zeros({1}, torch::TensorOptions().device(home));
  for (auto& [where, ts] : by_device) {
    const auto dev = ts.front().device();
    auto found_here = dev == home ? found : torch::zeros({1}, torch::TensorOptions().device(dev));
    auto inv = factor.defined() ? factor.to(dev, torch::kFloat).reshape({1})
                                : torch::ones({1}, torch::TensorOptions().device(dev));
    at::_amp_foreach_non_finite_check_and_unscale_(ts, found_here, inv);
    if (dev != home) found = torch::maximum(found, found_here.to(home));
  }
  return found;
}

torch::Tensor sumOfAllSquares(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const auto home = grads.empty() ? torch::Device(torch::kCPU) : grads.front().device();
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(home));
  for (const auto& g : grads) sum += sumOfSquares(g).to(home);
  return sum;
}

torch::Tensor sumOfAllSquares(const std::vector<torch::Tensor>& grads,
                              const std::vector<double>& weights) {
  torch::NoGradGuard no_grad;
  const auto home = grads.empty() ? torch::Device(torch::kCPU) : grads.front().device();
  auto sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(home));
  for (size_t i = 0; i < grads.size(); ++i) sum += sumOfSquares(grads[i]).to(home) * weights[i];
  return sum;
}

void clipToNorm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm,
                double max_norm) {
  if (grads.empty()) return;
  torch::NoGradGuard no_grad;
  // Clamped at 1, the factor leaves the gradients bit for bit as they are when within the bound.
  const auto coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
  // A pipeline's stages: one copy of the factor per device.
  std::map<std::pair<int, int>, torch::Tensor> per_device;
  for (const auto& g : grads) {
    auto& c = per_device[{static_cast<int>(g.device().type()), g.device().index()}];
    if (!c.defined()) c = coef.to(g.device());
    const_cast<torch::Tensor&>(g).mul_(c);
  }
}

int64_t distinctStorageBytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  int64_t n = 0;
  for (const auto& t : tensors)
    if (t.defined() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
      n += static_cast<int64_t>(t.storage().nbytes());
  return n;
}

}  // namespace ltrain::distributed
