// One optimizer step, read top to bottom in TrainStep::run: for each micro-batch forward, loss,
// backward (the last one's gradients reduced across ranks while backward runs); then the
// finiteness decision, clipping, and the optimizer step at the schedule's learning rate. Which
// strategy keeps the replicas in step is the parallel plan's business, not the step's.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "ltrain/compute/devices.h"
#include "ltrain/config/experiment_config.h"
#include "ltrain/data/loader.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/models/model.h"
#include "ltrain/models/moe.h"
#include "ltrain/train/dpo.h"
#include "ltrain/train/faults.h"
#include "ltrain/train/grad_scaler.h"

namespace ltrain::train {

// Where the step stands, for its messages: the optimizer steps done before it, the epoch and the
// micro-batches of the epoch already consumed.
struct StepPosition {
  int64_t step = 0, epoch = 0, batch_in_epoch = 0, rank = 0;
};

struct StepResult {
  torch::Tensor loss;  // this rank's mean loss over the micro-batches, on the device
  // Inf or nan gradients on some rank: every rank skips this step. Decided on the host where
  // reading the flag costs nothing (the CPU); on a GPU `found_inf` holds the flag, the optimizer
  // skipped on the device, and the loop reads it once per log window.
  bool skipped = false;
  torch::Tensor found_inf;
  int64_t samples = 0;      // examples this rank consumed
  torch::Tensor dpo_stats;  // finetune.method dpo: DpoTerms::stats summed over the micro-batches
  // Mixture-of-experts families: the routers' load-balancing loss (the mean over the
  // micro-batches) and the tokens each layer's experts got, [layers, experts], summed.
  torch::Tensor aux_loss, expert_counts;
  double data_wait_s = 0;
};

class TrainStep {
 public:
  TrainStep(const config::ExperimentConfig& cfg, models::Classifier& model,
            const compute::Devices& devices, distributed::ParallelPlan& plan, GradScaler& scaler,
            const Faults& faults, Dpo* dpo = nullptr);

  // Consumes the next `micro_batches` batches of `loader` and updates the model at rate `lr`.
  // std::runtime_error for inf/nan gradients under train.nonfinite stop.
  StepResult run(data::Loader& loader, const StepPosition& at, int64_t micro_batches, double lr);

 private:
  data::Batch nextBatch(data::Loader& loader, StepResult& r);
  torch::Tensor forwardLoss(const data::Batch& b, int64_t step, StepResult& r);
  torch::Tensor withRouterLoss(const torch::Tensor& loss, const models::RouterTally& routers,
                               StepResult& r) const;
  torch::Tensor pipelineForwardBackward(const data::Batch& b, int64_t step, int64_t micro_batches,
                                        bool last);
  void snapshotBuffers();
  void restoreBuffers(const torch::Tensor& found_inf);
  void backward(const torch::Tensor& loss, int64_t micro_batches);
  StepResult skip(StepResult r, const StepPosition& at, int64_t micro_batches);

  const config::ExperimentConfig& cfg_;
  models::Classifier& model_;
  const compute::Devices& devices_;
  distributed::ParallelPlan& plan_;
  GradScaler& scaler_;
  const Faults& faults_;
  Dpo* dpo_;  // finetune.method dpo: the loss is DPO's on preference pairs
  // Batch norm's statistics before the step: a skipped step's forward must not leave them.
  std::vector<torch::Tensor> buffers_, snapshot_;
};

}  // namespace ltrain::train
