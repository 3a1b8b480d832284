// data.packing: several examples in one block. For the forward that runs on this thread, the step
// gives each token's position within its own example ([B, T], 0 where an example starts); the
// attention of the transformer families then lets a token see only the earlier tokens of its own
// example, and position tables and rotations count from each example's start, so that an
// example's outputs are what they would be alone. Thread-local rather than a forward argument:
// the layers' forward(x) stays the one every other path calls.
#pragma once
#include <torch/types.h>

#include <map>

namespace ltrain::models {

class PackedPositions {
 public:
  explicit PackedPositions(torch::Tensor positions);
  ~PackedPositions();
  PackedPositions(const PackedPositions&) = delete;
  PackedPositions& operator=(const PackedPositions&) = delete;

 private:
  friend const torch::Tensor* packedPositions();
  friend const torch::Tensor& packedAttentionMask(int64_t window);
  PackedPositions* previous_;
  torch::Tensor positions_;
  std::map<int64_t, torch::Tensor> masks_;  // by window: made once a forward, not once a layer
};

// The positions in force on this thread ([B, T] int64), or nullptr when the block is one example.
const torch::Tensor* packedPositions();

// The attention mask of the packed block in force (packedPositions() not null), [B, 1, T, T]
// bool: query i sees key j of its own example with j <= i (and, `window` > 0, i - j < window).
const torch::Tensor& packedAttentionMask(int64_t window);

}  // namespace ltrain::models
