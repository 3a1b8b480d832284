#include "ltrain/models/packing.h"

#include <torch/torch.h>

namespace ltrain::models {
namespace {

thread_local const torch::Tensor* current = nullptr;

}  // namespace

PackedPositions::PackedPositions(torch::Tensor positions)
    : previous_(current), positions_(std::move(positions)) {
  current = &positions_;
}

PackedPositions::~PackedPositions() {
  current = previous_;
}

const torch::Tensor* packedPositions() {
  return current;
}

torch::Tensor packedAttentionMask(const torch::Tensor& positions, int64_t window) {
  // An example is the run of tokens from one position 0 to the next: number them.
  const auto example = positions.eq(0).cumsum(1);  // [B, T]
  const int64_t t = positions.size(1);
  auto mask = example.unsqueeze(2).eq(example.unsqueeze(1));  // [B, T(query), T(key)]
  auto causal =
      torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(positions.device()))
          .tril();
  if (window > 0) causal = causal.triu(1 - window);
  return (mask & causal).unsqueeze(1);
}

}  // namespace ltrain::models
