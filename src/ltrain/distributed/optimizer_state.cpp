#include "ltrain/distributed/optimizer_state.h"

#include <torch/torch.h>

#include <stdexcept>

#include "ltrain/optim/fused.h"

namespace ltrain::distributed {

// LibTorch keeps the state in a per-type struct, so it is moved in and out by type.
bool readParamState(const torch::optim::Optimizer& opt, const torch::Tensor& p, ParamState& out) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) return false;
  out = ParamState{};
  auto add = [&](const char* name, const torch::Tensor& t) {
    if (t.defined()) out.tensors.emplace_back(name, t);
  };
  if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
    add("momentum_buffer", s->momentum_buffer());
  } else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
    out.step = a->step();
    add("exp_avg", a->exp_avg()), add("exp_avg_sq", a->exp_avg_sq());
    add("max_exp_avg_sq", a->max_exp_avg_sq());
  } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get())) {
    out.step = w->step();
    add("exp_avg", w->exp_avg()), add("exp_avg_sq", w->exp_avg_sq());
    add("max_exp_avg_sq", w->max_exp_avg_sq());
  } else {
    throw std::logic_error("optimizer state of an unknown optimizer type");
  }
  return true;
}

void writeParamState(torch::optim::Optimizer& opt, const torch::Tensor& p, const ParamState& in) {
  auto get = [&](const char* name) {
    for (const auto& [n, t] : in.tensors)
      if (n == name) return t;
    return torch::Tensor();
  };
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  if (dynamic_cast<torch::optim::SGD*>(&opt)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(get("momentum_buffer"));
    state = std::move(s);
  } else if (dynamic_cast<torch::optim::Adam*>(&opt)) {
    auto a = std::make_unique<torch::optim::AdamParamState>();
    a->step(in.step), a->exp_avg(get("exp_avg")), a->exp_avg_sq(get("exp_avg_sq"));
    a->max_exp_avg_sq(get("max_exp_avg_sq"));
    state = std::move(a);
  } else if (dynamic_cast<torch::optim::AdamW*>(&opt)) {
    auto w = std::make_unique<torch::optim::AdamWParamState>();
    w->step(in.step), w->exp_avg(get("exp_avg")), w->exp_avg_sq(get("exp_avg_sq"));
    w->max_exp_avg_sq(get("max_exp_avg_sq"));
    state = std::move(w);
  } else {
    throw std::logic_error("an optimizer type whose state ltrain cannot move");
  }
  opt.state()[p.unsafeGetTensorImpl()] = std::move(state);
  if (auto* fused = dynamic_cast<optim::DeviceSkippable*>(&opt)) fused->forgetDeviceSteps();
}

int64_t optimizerStateBytes(const torch::optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (const auto& group : opt.param_groups())
    for (const auto& p : group.params()) {
      ParamState st;
      if (!readParamState(opt, p, st)) continue;
      for (const auto& [name, t] : st.tensors) bytes += t.numel() * t.element_size();
    }
  return bytes;
}

void copyStateNextToParameters(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  torch::NoGradGuard no_grad;
  for (const auto& group : to.param_groups())
    for (const auto& p : group.params()) {
      ParamState st;
      if (!readParamState(from, p, st)) continue;
      for (auto& [name, t] : st.tensors)
        t = t.to(p.device(), /*non_blocking=*/false, /*copy=*/true);
      writeParamState(to, p, st);
    }
}

}  // namespace ltrain::distributed
