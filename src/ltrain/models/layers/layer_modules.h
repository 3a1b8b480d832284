// The containers and norm model.layers builds that LibTorch's C++ API lacks.
#pragma once
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

namespace ltrain::models::layer_graph {

// Layers in a row (registered "0", "1", ... as an nn.Sequential's): `sequential`, or with
// `residual` x + f(x) and an optional projection of x ("proj") where f changes the shape.
// LibTorch's Sequential cannot sit inside another (its forward is a template), hence this.
// Cloneable (dist.strategy dp): reset(), which only a clone calls, registers copies of the parts.
struct ChainImpl : torch::nn::Cloneable<ChainImpl> {
  ChainImpl(std::vector<torch::nn::AnyModule> parts, bool residual, torch::nn::AnyModule proj)
      : parts_(std::move(parts)), residual_(residual), proj_(std::move(proj)) {
    for (size_t i = 0; i < parts_.size(); ++i) register_module(std::to_string(i), parts_[i].ptr());
    if (!proj_.is_empty()) register_module("proj", proj_.ptr());
  }
  void reset() override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      parts_[i] = parts_[i].clone();
      register_module(std::to_string(i), parts_[i].ptr());
    }
    if (!proj_.is_empty()) proj_ = proj_.clone(), register_module("proj", proj_.ptr());
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = x;
    for (auto& p : parts_) y = p.forward(y);
    if (!residual_) return y;
    return (proj_.is_empty() ? x : proj_.forward<torch::Tensor>(x)) + y;
  }
  std::vector<torch::nn::AnyModule> parts_;
  bool residual_;
  torch::nn::AnyModule proj_;
};
TORCH_MODULE(Chain);

// nn.RMSNorm over the last dimension (LibTorch's C++ API has none): x / rms(x) * weight, the
// mean of squares in float32 as PyTorch computes it.
struct RmsNormImpl : torch::nn::Cloneable<RmsNormImpl> {
  RmsNormImpl(int64_t dim, double eps) : dim(dim), eps(eps) { reset(); }
  void reset() override { weight = register_parameter("weight", torch::ones({dim})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto xf = x.to(torch::kFloat);
    auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
    return y.to(x.scalar_type()) * weight;
  }
  int64_t dim;
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

}  // namespace ltrain::models::layer_graph
