// Optimizers by name (sgd, adam, adamw): the fused multi-tensor ones of optim/fused.h, with
// LibTorch's options and state; and setting their learning rate per step.
#pragma once
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/optim/fused.h"

namespace ltrain::optim {

// optimizer.decay matrices: the parameters of 2 or more dimensions decay, the others not (two
// parameter groups); or, given `decay_ranges` (one list per parameter, ZeRO's flat slices), the
// elements in those ranges.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const config::OptimizerConfig& cfg,
                                                       std::vector<torch::Tensor> params,
                                                       std::vector<DecayRanges> decay_ranges = {});
void setLearningRate(torch::optim::Optimizer& opt, double lr);

}  // namespace ltrain::optim
