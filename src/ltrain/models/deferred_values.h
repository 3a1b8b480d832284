// The values of a model whose parameters were made without memory (dist.zero 3's deferred build,
// models/layerwise.h): whoever shards the model asks for them a layer at a time, once that
// layer's parameters have memory, so that the whole model never exists in one place.
#pragma once
#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

namespace ltrain::models {

// The elements [first, second) of a parameter (flattened) that its caller keeps: a source that can
// read ranges (a checkpoint) writes only those; one that must make the whole layer (the random
// initialisation) writes all.
using WantedElements = std::function<std::pair<int64_t, int64_t>(const torch::Tensor& param)>;

class DeferredValues {
 public:
  virtual ~DeferredValues() = default;
  // Writes the values of layer `layer`'s own parameters (`target.parameters()`), at least the
  // elements `wanted` names.
  virtual void fill(size_t layer, torch::nn::Module& target, const WantedElements& wanted) = 0;
};

}  // namespace ltrain::models
