#include "ltrain/train/optimizer.h"

#include <torch/torch.h>

#include "ltrain/optim/fused.h"

namespace ltrain::train {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const config::OptimizerConfig& c,
                                                       std::vector<torch::Tensor> params) {
  namespace optim = torch::optim;
  if (c.name == config::OptimizerName::kAdam)
    return std::make_unique<ltrain::optim::FusedAdam>(params, optim::AdamOptions(c.lr)
                                                                  .betas({c.betas[0], c.betas[1]})
                                                                  .eps(c.eps)
                                                                  .weight_decay(c.weight_decay));
  if (c.name == config::OptimizerName::kAdamw)
    return std::make_unique<ltrain::optim::FusedAdamW>(params, optim::AdamWOptions(c.lr)
                                                                   .betas({c.betas[0], c.betas[1]})
                                                                   .eps(c.eps)
                                                                   .weight_decay(c.weight_decay));
  return std::make_unique<ltrain::optim::FusedSGD>(params, optim::SGDOptions(c.lr)
                                                               .momentum(c.momentum)
                                                               .nesterov(c.nesterov)
                                                               .weight_decay(c.weight_decay));
}

void setLearningRate(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

}  // namespace ltrain::train
