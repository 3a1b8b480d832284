// finetune.method dpo: Direct Preference Optimization (Rafailov et al., 2023) as TRL's DPOTrainer
// computes it (its default sigmoid loss). Each answer of a pair is scored by the summed
// log-probability of its learned tokens under the model being tuned and under the reference, the
// model as the run started; with the log-ratios r = score - reference score,
//   loss = mean over pairs of -log sigmoid(beta * (r_chosen - r_rejected)),
// and TRL's rewards are beta * r. The reference needs no second model: the starting values of the
// parameters that train are kept aside and swapped in (no copy) for its forward. With LoRA those
// are the adapters alone (fresh ones add zero: the reference is then the base).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "ltrain/compute/devices.h"
#include "ltrain/config/experiment_config.h"
#include "ltrain/models/model.h"

namespace ltrain::train {

// [N, T, V] logits and [N, T] next-token targets (-100: not learned) -> [N], each sequence's sum
// of log p(target) over its learned tokens.
torch::Tensor sequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets);

struct DpoTerms {
  torch::Tensor loss;  // the mean over the pairs
  // Sums over the pairs, as a [4] float tensor on the device (read once per log window): the
  // chosen rewards, the rejected rewards, the pairs whose chosen reward is the higher, the pairs.
  torch::Tensor stats;
};

// The four scores of B pairs, [B] each.
DpoTerms dpoLoss(const torch::Tensor& chosen, const torch::Tensor& rejected,
                 const torch::Tensor& ref_chosen, const torch::Tensor& ref_rejected, double beta);

// TRL's metric names for DpoTerms::stats' means: rewards/chosen, rewards/rejected,
// rewards/accuracies, rewards/margins, from the sums over a window.
std::vector<std::pair<std::string, double>> dpoMetrics(const std::vector<double>& sums);

class Dpo {
 public:
  // Keeps the current values of `model`'s trainable parameters as the reference: call once the
  // starting weights (init_from, adapters) are in, before a resume loads the run's own.
  Dpo(double beta, models::Classifier model);
  // Once the plan has placed the model: the kept values go next to their parameters.
  void place();
  // B pairs, inputs and targets [B, 2, T] (chosen, rejected) on the main device.
  DpoTerms loss(const torch::Tensor& inputs, const torch::Tensor& targets,
                const compute::Devices& devices);

 private:
  torch::Tensor referenceLogProbs(const torch::Tensor& x, const torch::Tensor& y,
                                  const compute::Devices& devices);
  double beta_;
  models::Classifier model_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_, start_;
};

}  // namespace ltrain::train
