#include "ltrain/models/packing.h"

#include <torch/torch.h>

namespace ltrain::models {
namespace {

thread_local PackedPositions* current = nullptr;

}  // namespace

PackedPositions::PackedPositions(torch::Tensor positions)
    : previous_(current), positions_(std::move(positions)) {
  current = this;
}

PackedPositions::~PackedPositions() {
  current = previous_;
}

const torch::Tensor* packedPositions() {
  return current ? &current->positions_ : nullptr;
}

const torch::Tensor& packedAttentionMask(int64_t window) {
  auto& mask = current->masks_[window];
  if (mask.defined()) return mask;
  const auto& positions = current->positions_;
  // An example is the run of tokens from one position 0 to the next: number them.
  const auto example = positions.eq(0).cumsum(1);  // [B, T]
  const int64_t t = positions.size(1);
  const auto same = example.unsqueeze(2).eq(example.unsqueeze(1));  // [B, T(query), T(key)]
  auto causal =
      torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(positions.device()))
          .tril();
  if (window > 0) causal = causal.triu(1 - window);
  mask = (same & causal).unsqueeze(1);
  return mask;
}

}  // namespace ltrain::models
