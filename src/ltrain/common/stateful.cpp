#include "ltrain/common/stateful.h"

#include <torch/torch.h>

#include <stdexcept>

namespace ltrain {

torch::Tensor stateScalar(int64_t v) {
  return torch::tensor(v, torch::kLong);
}

torch::Tensor stateScalar(double v) {
  return torch::tensor(v, torch::kDouble);
}

const torch::Tensor* findState(const StateDict& s, const std::string& name) {
  for (const auto& [k, t] : s)
    if (k == name) return &t;
  return nullptr;
}

namespace {
const torch::Tensor* need(const StateDict& s, const std::string& name, bool required) {
  const auto* t = findState(s, name);
  if (!t && required) throw std::runtime_error("it has no '" + name + "'");
  if (t && t->numel() != 1) throw std::runtime_error("its '" + name + "' is not one number");
  return t;
}
}  // namespace

int64_t stateInt(const StateDict& s, const std::string& name, int64_t fallback, bool required) {
  const auto* t = need(s, name, required);
  return t ? t->item<int64_t>() : fallback;
}

double stateDouble(const StateDict& s, const std::string& name, double fallback, bool required) {
  const auto* t = need(s, name, required);
  return t ? t->item<double>() : fallback;
}

}  // namespace ltrain
