#include "ltrain/train/step.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "ltrain/train/loss.h"
#include "ltrain/train/precision.h"

namespace ltrain::train {

TrainStep::TrainStep(const config::ExperimentConfig& cfg, models::Classifier& model,
                     const Devices& devices, distributed::GradientSync& sync, GradScaler& scaler,
                     const Faults& faults)
    : cfg_(cfg), model_(model), devices_(devices), sync_(sync), scaler_(scaler), faults_(faults) {}

StepResult TrainStep::run(data::Loader& loader, const StepPosition& at, int64_t micro_batches,
                          double lr) {
  StepResult r;
  r.loss = torch::zeros({}, torch::TensorOptions().device(devices_.main));
  for (int64_t i = 0; i < micro_batches; ++i) {
    const data::Batch b = nextBatch(loader, r);
    sync_.beforeForward(/*first=*/i == 0, /*last=*/i == micro_batches - 1);
    torch::Tensor loss = forwardLoss(b);
    faults_.duringStep(at.step + 1, loss);
    backward(loss, micro_batches);
    r.loss += loss.detach().to(devices_.main) / micro_batches;
    r.samples += b.targets.size(0);
  }
  sync_.finishBackward();
  // Decided on the reduced gradients, which are the same on every rank (an inf or nan anywhere
  // reaches every rank through the sum): all skip, or all stop, at the same step.
  r.found_inf = sync_.findInf(scaler_.enabled() ? scaler_.inverse() : torch::Tensor());
  if (scaler_.enabled()) scaler_.update(r.found_inf);
  if (!r.found_inf.is_cuda()) {  // reading the flag costs nothing off the GPU: decide now
    if (r.found_inf.item<float>() != 0.f) return skip(std::move(r), at, micro_batches);
    r.found_inf = torch::Tensor();
  }
  if (cfg_.train.clip_grad_norm > 0) sync_.clipGradNorm(cfg_.train.clip_grad_norm);
  sync_.optimizerStep(lr, r.found_inf);
  return r;
}

data::Batch TrainStep::nextBatch(data::Loader& loader, StepResult& r) {
  const auto start = std::chrono::steady_clock::now();
  data::Batch b;
  if (!loader.next(b)) throw std::runtime_error("loader ended before the epoch's last batch");
  r.data_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return b;
}

torch::Tensor TrainStep::forwardLoss(const data::Batch& b) {
  auto x = b.inputs.to(devices_.main, /*non_blocking=*/true);
  auto y = b.targets.to(devices_.main, /*non_blocking=*/true);
  AutocastScope autocast(cfg_.train.precision, devices_.main.type());
  return crossEntropy(forward(model_, x, devices_).to(torch::kFloat), y);
}

// The mean over micro-batches, scaled up for fp16 so that small gradients survive its range.
void TrainStep::backward(const torch::Tensor& loss, int64_t micro_batches) {
  const double k = static_cast<double>(micro_batches);
  if (scaler_.enabled())
    (loss * (scaler_.scaleTensor().reshape({}) / k)).backward();
  else
    (loss / k).backward();
}

StepResult TrainStep::skip(StepResult r, const StepPosition& at, int64_t micro_batches) {
  if (!scaler_.enabled() && cfg_.train.nonfinite == config::NonFinite::kStop)
    throw std::runtime_error(fmt::format(
        "gradients are not finite at step {} (epoch {}, batches {}-{} of the epoch; loss on "
        "rank {}: {}); train.nonfinite=skip would skip such steps",
        at.step + 1, at.epoch + 1, at.batch_in_epoch, at.batch_in_epoch + micro_batches - 1,
        at.rank, r.loss.item<double>()));
  sync_.discardGradients();
  r.skipped = true;
  r.found_inf = torch::Tensor();
  return r;
}

}  // namespace ltrain::train
