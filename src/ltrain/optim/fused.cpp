#include "ltrain/optim/fused.h"

#include <torch/torch.h>

#include <map>
#include <optional>
#include <tuple>
#include <vector>

namespace ltrain::optim {
namespace {

// Device type, index, dtype, and whether the parameters' decay is by ranges (setDecayRanges):
// one kernel call per kind.
using DeviceKey = std::tuple<int, int, int, bool>;
DeviceKey keyOf(const torch::Tensor& t, bool masked) {
  return {static_cast<int>(t.device().type()), t.device().index(),
          static_cast<int>(t.scalar_type()), masked};
}

// Weight decay in ranges, outside the kernel (which then gets none): decoupled (AdamW) scales
// the parameter by 1 - lr * wd there, unless the step is skipped; coupled (SGD, Adam) adds
// wd * parameter to the gradient there, as the kernels do. In place, range by range: nothing the
// size of the parameter is allocated.
void decayInRanges(const std::vector<torch::Tensor>& params,
                   const std::vector<torch::Tensor>& grads,
                   const std::vector<const DecayRanges*>& ranges, double lr, double wd,
                   bool decoupled, const std::optional<torch::Tensor>& flag) {
  if (wd == 0) return;
  for (size_t i = 0; i < params.size(); ++i) {
    if (decoupled) {
      // p * (1 - lr * wd), one rounding as the fused kernel's own decay (p + p * -lr * wd rounds
      // twice, and parted ZeRO from DDP by 1e-5 in 20 AdamW steps).
      auto factor = torch::scalar_tensor(1.0 - lr * wd, params[i].options());
      if (flag) factor = torch::where(*flag > 0, torch::ones_like(factor), factor);
      for (const auto& r : *ranges[i]) params[i].narrow(0, r.begin, r.size()).mul_(factor);
    } else {
      for (const auto& r : *ranges[i])
        grads[i].narrow(0, r.begin, r.size()).add_(params[i].narrow(0, r.begin, r.size()), wd);
    }
  }
}

// found_inf where the fused kernel reads it: a 0-d float next to the parameters (the CPU kernels
// read it on the host, which costs nothing there).
std::optional<torch::Tensor> flagOn(const torch::Tensor& found_inf, const torch::Device& d) {
  if (!found_inf.defined()) return std::nullopt;
  return found_inf.to(d, torch::kFloat).reshape({});
}

torch::Tensor runClosure(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode grad(true);
  return closure();
}

// The parameters of one group, one device and dtype at a time, with their Adam state.
struct AdamLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  std::vector<const DecayRanges*> decay;
};

using StepCounts = std::unordered_map<const c10::TensorImpl*, torch::Tensor>;

template <class State, class Options>
void adamStep(torch::optim::Optimizer& opt, StepCounts& steps, const torch::Tensor& found_inf,
              bool decoupled, const DeviceSkippable& self) {
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    auto& o = static_cast<Options&>(group.options());
    std::map<DeviceKey, AdamLists> by_device;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = opt.state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as LibTorch starts it: step 0, zero moments
        auto s = std::make_unique<State>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& st = static_cast<State&>(*slot);
      auto& count = steps[p.unsafeGetTensorImpl()];
      if (!count.defined())
        count = torch::full({}, static_cast<double>(st.step()),
                            torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
      const DecayRanges* decay = self.decayRanges(p);
      auto& l = by_device[keyOf(p, decay != nullptr)];
      if (decay) l.decay.push_back(decay);
      l.params.push_back(p);
      l.grads.push_back(p.grad());
      l.exp_avgs.push_back(st.exp_avg());
      l.exp_avg_sqs.push_back(st.exp_avg_sq());
      if (o.amsgrad()) l.max_exp_avg_sqs.push_back(st.max_exp_avg_sq());
      l.steps.push_back(count);
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [key, l] : by_device) {
      const auto flag = flagOn(found_inf, l.params.front().device());
      double wd = o.weight_decay();
      if (!l.decay.empty()) {
        decayInRanges(l.params, l.grads, l.decay, o.lr(), wd, decoupled, flag);
        wd = 0;
      }
      at::_foreach_add_(l.steps, 1.0);
      if (decoupled)
        at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps,
                          o.lr(), beta1, beta2, wd, o.eps(), o.amsgrad(),
                          /*maximize=*/false, std::nullopt, flag);
      else
        at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps,
                         o.lr(), beta1, beta2, wd, o.eps(), o.amsgrad(),
                         /*maximize=*/false, std::nullopt, flag);
      // A skipped step does not count, as torch.optim rolls it back on the device.
      if (flag) at::_foreach_sub_(l.steps, std::vector<torch::Tensor>(l.steps.size(), *flag));
    }
  }
}

template <class State>
void writeBack(torch::optim::Optimizer& opt, const StepCounts& steps) {
  for (const auto& entry : steps) {
    auto it = opt.state().find(const_cast<c10::TensorImpl*>(entry.first));
    if (it == opt.state().end()) continue;
    const float count = entry.second.item().toFloat();
    static_cast<State&>(*it->second).step(static_cast<int64_t>(count));
  }
}

}  // namespace

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::Tensor loss = runClosure(closure);
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
    const bool momentum = o.momentum() != 0;
    // params, grads, momentum buffers; and their decay ranges
    std::map<DeviceKey, std::vector<std::vector<torch::Tensor>>> by_device;
    std::map<DeviceKey, std::vector<const DecayRanges*>> decay_of;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const DecayRanges* decay = decayRanges(p);
      const auto key = keyOf(p, decay != nullptr);
      auto& l = by_device[key];
      if (l.empty()) l.resize(3);
      l[0].push_back(p), l[1].push_back(p.grad());
      if (decay) decay_of[key].push_back(decay);
      if (!momentum) continue;
      auto& slot = state()[p.unsafeGetTensorImpl()];
      if (!slot) slot = std::make_unique<torch::optim::SGDParamState>();
      auto& st = static_cast<torch::optim::SGDParamState&>(*slot);
      // A zero buffer makes the first step's update momentum * 0 + grad = grad exactly, as
      // LibTorch's clone of the first gradient, and a skipped first step leaves a valid buffer.
      if (!st.momentum_buffer().defined())
        st.momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      l[2].push_back(st.momentum_buffer());
    }
    for (auto& [key, l] : by_device) {
      double wd = o.weight_decay();
      if (const auto d = decay_of.find(key); d != decay_of.end()) {
        decayInRanges(l[0], l[1], d->second, o.lr(), wd, /*decoupled=*/false, std::nullopt);
        wd = 0;
      }
      at::_fused_sgd_(l[0], l[1], l[2], wd, o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                      /*maximize=*/false, /*is_first_step=*/false, std::nullopt,
                      flagOn(found_inf_, l[0].front().device()));
    }
  }
  return loss;
}

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::Tensor loss = runClosure(closure);
  adamStep<torch::optim::AdamParamState, torch::optim::AdamOptions>(*this, steps_, found_inf_,
                                                                    /*decoupled=*/false, *this);
  return loss;
}

void FusedAdam::syncStepsToHost() {
  writeBack<torch::optim::AdamParamState>(*this, steps_);
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss = runClosure(closure);
  adamStep<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(*this, steps_, found_inf_,
                                                                      /*decoupled=*/true, *this);
  return loss;
}

void FusedAdamW::syncStepsToHost() {
  writeBack<torch::optim::AdamWParamState>(*this, steps_);
}

void syncStepsToHost(torch::optim::Optimizer& opt) {
  if (auto* s = dynamic_cast<DeviceSkippable*>(&opt)) s->syncStepsToHost();
}

bool setFoundInf(torch::optim::Optimizer& opt, const torch::Tensor& found_inf) {
  auto* s = dynamic_cast<DeviceSkippable*>(&opt);
  if (!s) return false;
  s->setFoundInf(found_inf);
  return true;
}

}  // namespace ltrain::optim
