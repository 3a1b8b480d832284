#include "ltrain/train/step.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <stdexcept>

#include "ltrain/compute/precision.h"
#include "ltrain/config/model_families.h"
#include "ltrain/models/moe.h"
#include "ltrain/models/packing.h"
#include "ltrain/models/tensor_parallel.h"
#include "ltrain/train/loss.h"

namespace ltrain::train {

TrainStep::TrainStep(const config::ExperimentConfig& cfg, models::Classifier& model,
                     const compute::Devices& devices, distributed::ParallelPlan& plan,
                     GradScaler& scaler, const Faults& faults, Dpo* dpo)
    : cfg_(cfg),
      model_(model),
      devices_(devices),
      plan_(plan),
      scaler_(scaler),
      faults_(faults),
      dpo_(dpo) {
  // Only where a step can be skipped rather than stop the run.
  if (cfg.train.nonfinite == config::NonFinite::kSkip || scaler.enabled())
    for (auto& b : model->buffers())
      if (b.is_floating_point()) buffers_.push_back(b), snapshot_.push_back(torch::empty_like(b));
}

void TrainStep::snapshotBuffers() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) snapshot_[i].copy_(buffers_[i]);
}

// `found_inf` undefined: the step is known skipped; else only where the flag is set.
void TrainStep::restoreBuffers(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (!found_inf.defined())
      buffers_[i].copy_(snapshot_[i]);
    else
      buffers_[i].copy_(torch::where(found_inf.reshape({}).to(buffers_[i].device()) > 0,
                                     snapshot_[i], buffers_[i]));
  }
}

StepResult TrainStep::run(data::Loader& loader, const StepPosition& at, int64_t micro_batches,
                          double lr) {
  StepResult r;
  r.loss = torch::zeros({}, torch::TensorOptions().device(devices_.main));
  for (int64_t i = 0; i < micro_batches; ++i) {
    const data::Batch b = nextBatch(loader, r);
    const bool last = i == micro_batches - 1;
    // 1F1B arms each stage's reduction itself, just before that stage's last backward.
    const bool one_f_one_b = model_->pipeline && model_->pipeline->oneFOneB();
    plan_.prepare(distributed::MicroStep::forward(/*first=*/i == 0, last && !one_f_one_b));
    if (i == 0) snapshotBuffers();
    torch::Tensor loss;
    if (one_f_one_b) {
      loss = pipelineForwardBackward(b, at.step + 1, micro_batches, last);
    } else {
      loss = forwardLoss(b, at.step + 1, r);
      faults_.duringStep(at.step + 1, loss);
      backward(loss, micro_batches);
    }
    r.loss += loss.detach().to(devices_.main) / micro_batches;
    r.samples += b.targets.size(0);
  }
  if (r.aux_loss.defined()) r.aux_loss /= static_cast<double>(micro_batches);
  // Decided on the reduced gradients, which are the same on every rank (an inf or nan anywhere
  // reaches every rank through the sum): all skip, or all stop, at the same step.
  r.found_inf = plan_.finishGradients(scaler_.enabled() ? scaler_.inverse() : torch::Tensor());
  if (scaler_.enabled()) scaler_.update(r.found_inf);
  if (!r.found_inf.is_cuda()) {  // reading the flag costs nothing off the GPU: decide now
    if (r.found_inf.item<float>() != 0.f) return skip(std::move(r), at, micro_batches);
    r.found_inf = torch::Tensor();
  } else {
    restoreBuffers(r.found_inf);  // on the device, where the flag is
  }
  plan_.step({lr, cfg_.train.clip_grad_norm, r.found_inf});
  return r;
}

data::Batch TrainStep::nextBatch(data::Loader& loader, StepResult& r) {
  const auto start = std::chrono::steady_clock::now();
  data::Batch b;
  if (!loader.next(b)) throw std::runtime_error("loader ended before the epoch's last batch");
  r.data_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return b;
}

torch::Tensor TrainStep::forwardLoss(const data::Batch& b, int64_t step, StepResult& r) {
  auto x = b.inputs.to(devices_.main, /*non_blocking=*/true);
  faults_.beforeForward(step, x);
  auto y = b.targets.to(devices_.main, /*non_blocking=*/true);
  std::optional<models::PackedPositions> packed;
  if (cfg_.data.packing) {  // [B, 2, T]: the tokens, and each one's position in its example
    packed.emplace(x.select(1, 1).contiguous());
    x = x.select(1, 0).contiguous();
  }
  compute::AutocastScope autocast(cfg_.train.precision, devices_.main.type());
  if (dpo_) {  // pairs [B, 2, T]: the answers scored against the reference
    auto terms = dpo_->loss(x, y, devices_);
    r.dpo_stats = r.dpo_stats.defined() ? r.dpo_stats + terms.stats : terms.stats;
    return terms.loss;
  }
  if (model_->tp) {  // the head gives this rank's slice of the vocabulary's logits
    models::LocalLogits local(*model_->tp);
    return models::vocabParallelCrossEntropy(
        compute::forward(model_, x, devices_).to(torch::kFloat), y, *model_->tp);
  }
  if (!config::modelFamily(cfg_.model.name).mixture_of_experts)
    return crossEntropy(compute::forward(model_, x, devices_).to(torch::kFloat), y);
  models::RouterTally routers;  // what the experts' layers of this forward chose
  auto loss = crossEntropy(compute::forward(model_, x, devices_).to(torch::kFloat), y);
  return withRouterLoss(loss, routers, r);
}

// transformers' MoE causal LM: loss + router_aux_loss_coef x the load-balancing loss, when
// output_router_logits; reported either way.
torch::Tensor TrainStep::withRouterLoss(const torch::Tensor& loss,
                                        const models::RouterTally& routers, StepResult& r) const {
  if (routers.layers() == 0) return loss;
  const auto aux = routers.auxLoss();
  const auto counts = routers.counts();
  r.aux_loss = r.aux_loss.defined() ? r.aux_loss + aux.detach() : aux.detach();
  r.expert_counts = r.expert_counts.defined() ? r.expert_counts + counts : counts;
  if (!cfg_.model.output_router_logits) return loss;
  return loss + cfg_.model.router_aux_loss_coef * aux;
}

// model.pipeline_schedule 1f1b: the pipeline runs forward and backward together, micro-batch by
// micro-batch, with the loss scaled as backward() scales it.
torch::Tensor TrainStep::pipelineForwardBackward(const data::Batch& b, int64_t step,
                                                 int64_t micro_batches, bool last) {
  auto x = b.inputs.to(devices_.main, /*non_blocking=*/true);
  faults_.beforeForward(step, x);
  auto y = b.targets.to(devices_.main, /*non_blocking=*/true);
  compute::AutocastScope autocast(cfg_.train.precision, devices_.main.type());
  const double k = static_cast<double>(micro_batches);
  const auto scale =
      scaler_.enabled()
          ? scaler_.scaleTensor().reshape({}) / k
          : torch::full({}, 1.0 / k,
                        torch::TensorOptions().dtype(torch::kFloat).device(devices_.main));
  bool first = true;
  auto loss_sum = [&](const torch::Tensor& out, const torch::Tensor& t) {
    auto l = crossEntropy(out, t, torch::kSum);
    if (first) faults_.duringStep(step, l), first = false;
    return l;
  };
  std::function<void(size_t)> arm;
  if (last)
    arm = [&](size_t stage) { plan_.prepare(distributed::MicroStep::lastBackwardOf(stage)); };
  return model_->pipeline->step(*model_, x, y, loss_sum, scale, arm);
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
        "rank {}: {}): the run diverged; lower optimizer.lr (peak {:g}){}, or set "
        "train.nonfinite=skip to skip a rare bad batch",
        at.step + 1, at.epoch + 1, at.batch_in_epoch, at.batch_in_epoch + micro_batches - 1,
        at.rank, r.loss.item<double>(), cfg_.optimizer.lr,
        cfg_.train.clip_grad_norm > 0 ? "" : " or clip the gradients (train.clip_grad_norm: 1.0)"));
  plan_.zeroGradients();
  restoreBuffers(torch::Tensor());
  r.skipped = true;
  r.found_inf = torch::Tensor();
  return r;
}

}  // namespace ltrain::train
