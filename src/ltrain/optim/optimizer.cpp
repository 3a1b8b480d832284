#include "ltrain/optim/optimizer.h"

#include <torch/torch.h>

#include "ltrain/optim/fused.h"

namespace ltrain::optim {
namespace {

// optimizer.decay matrices as nanoGPT's parameter groups: weights of 2 or more dimensions decay,
// biases and norms' scales do not. Empty groups are left out.
template <class Options>
std::vector<torch::optim::OptimizerParamGroup> groups(const std::vector<torch::Tensor>& params,
                                                      const Options& o, bool matrices_only) {
  std::vector<torch::optim::OptimizerParamGroup> out;
  if (!matrices_only) {
    out.emplace_back(params, std::make_unique<Options>(o));
    return out;
  }
  std::vector<torch::Tensor> decay, rest;
  for (const auto& p : params) (p.dim() >= 2 ? decay : rest).push_back(p);
  auto none = std::make_unique<Options>(o);
  none->weight_decay(0);
  if (!decay.empty()) out.emplace_back(decay, std::make_unique<Options>(o));
  if (!rest.empty()) out.emplace_back(rest, std::move(none));
  return out;
}

template <class Optimizer, class Options>
std::unique_ptr<torch::optim::Optimizer> make(const std::vector<torch::Tensor>& params,
                                              const Options& o, bool matrices_only,
                                              const std::vector<DecayRanges>& ranges) {
  auto opt = std::make_unique<Optimizer>(groups(params, o, matrices_only && ranges.empty()), o);
  if (matrices_only)
    for (size_t i = 0; i < ranges.size(); ++i) opt->setDecayRanges(params[i], ranges[i]);
  return opt;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const config::OptimizerConfig& c,
                                                       std::vector<torch::Tensor> params,
                                                       std::vector<DecayRanges> decay_ranges) {
  namespace optim = torch::optim;
  const bool matrices = c.decay == config::Decay::kMatrices && c.weight_decay > 0;
  if (c.name == config::OptimizerName::kAdam)
    return make<ltrain::optim::FusedAdam>(params,
                                          optim::AdamOptions(c.lr)
                                              .betas({c.betas[0], c.betas[1]})
                                              .eps(c.eps)
                                              .weight_decay(c.weight_decay),
                                          matrices, decay_ranges);
  if (c.name == config::OptimizerName::kAdamw)
    return make<ltrain::optim::FusedAdamW>(params,
                                           optim::AdamWOptions(c.lr)
                                               .betas({c.betas[0], c.betas[1]})
                                               .eps(c.eps)
                                               .weight_decay(c.weight_decay),
                                           matrices, decay_ranges);
  return make<ltrain::optim::FusedSGD>(params,
                                       optim::SGDOptions(c.lr)
                                           .momentum(c.momentum)
                                           .nesterov(c.nesterov)
                                           .weight_decay(c.weight_decay),
                                       matrices, decay_ranges);
}

void setLearningRate(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

}  // namespace ltrain::optim
