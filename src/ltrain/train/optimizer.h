// Optimizers by name (sgd, adam, adamw): the fused multi-tensor ones of optim/fused.h, with
// LibTorch's options and state; and setting their learning rate per step.
#pragma once
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"

namespace ltrain::train {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const config::OptimizerConfig& cfg,
                                                       std::vector<torch::Tensor> params);
void setLearningRate(torch::optim::Optimizer& opt, double lr);

}  // namespace ltrain::train
