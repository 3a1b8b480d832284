// SGD (momentum, Nesterov), Adam and AdamW computed as torch.optim computes them with
// fused=True: one ATen kernel per device for every parameter (_fused_sgd_, _fused_adam_,
// _fused_adamw_; CPU and CUDA) instead of LibTorch's loop over parameters, and a found_inf flag
// that skips a step on the device (fp16's loss scaler, train.nonfinite) without the host reading
// it. Written here because LibTorch's optimizers have neither. The state is LibTorch's own
// (SGDParamState, AdamParamState, AdamWParamState), so checkpoints and ZeRO's slices read it.
#pragma once
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <unordered_map>
#include <vector>

#include "ltrain/common/element_range.h"

namespace ltrain::optim {

// Of a flat parameter, the element ranges weight decay applies to.
using DecayRanges = std::vector<ElementRange>;

// What the training step needs of an optimizer beyond LibTorch's interface.
class DeviceSkippable {
 public:
  virtual ~DeviceSkippable() = default;
  // The next step() leaves parameters and state as they are when `found_inf` (1 element, on the
  // parameters' device or the CPU) is nonzero. Undefined: always step.
  void setFoundInf(torch::Tensor found_inf) { found_inf_ = std::move(found_inf); }
  // Step counts kept on the device (Adam's) written back into the LibTorch state, which then
  // reads right (checkpoints, ZeRO's gather). Synchronises the host with the device.
  virtual void syncStepsToHost() {}
  // After the state was written from outside (a checkpoint, ZeRO's slices): the device step
  // counts are taken from it again.
  virtual void forgetDeviceSteps() {}
  // Weight decay on `param` (1-d) only in `ranges`: ZeRO's flat slices hold matrices and biases
  // together, of which optimizer.decay matrices decays the matrices alone. Ranges, not a mask:
  // a byte per element was a quarter of the slices' memory again.
  void setDecayRanges(const torch::Tensor& param, DecayRanges ranges) {
    decay_ranges_[param.unsafeGetTensorImpl()] = std::move(ranges);
  }
  // The ranges of `p`, or null: decay where its group says.
  const DecayRanges* decayRanges(const torch::Tensor& p) const {
    auto it = decay_ranges_.find(p.unsafeGetTensorImpl());
    return it == decay_ranges_.end() ? nullptr : &it->second;
  }

 protected:
  torch::Tensor found_inf_;
  std::unordered_map<const c10::TensorImpl*, DecayRanges> decay_ranges_;
};

class FusedSGD final : public torch::optim::SGD, public DeviceSkippable {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdam final : public torch::optim::Adam, public DeviceSkippable {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void syncStepsToHost() override;
  void forgetDeviceSteps() override { steps_.clear(); }

 private:
  // Per parameter: its step count as a float tensor on its device (what the fused kernel reads).
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> steps_;
};

class FusedAdamW final : public torch::optim::AdamW, public DeviceSkippable {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void syncStepsToHost() override;
  void forgetDeviceSteps() override { steps_.clear(); }

 private:
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> steps_;
};

// syncStepsToHost() of `opt` when it is one of these; a no-op for other optimizers.
void syncStepsToHost(torch::optim::Optimizer& opt);
// setFoundInf() of `opt` when it is one of these; false when it cannot skip on the device.
bool setFoundInf(torch::optim::Optimizer& opt, const torch::Tensor& found_inf);

}  // namespace ltrain::optim
