// Calls around each top-level layer's forward, for whoever must act there: dist.zero 3 gathers a
// layer's parameters just before it runs and frees them after (distributed/sharded_parameters.h).
#pragma once
#include <torch/types.h>

#include <cstddef>
#include <vector>

namespace ltrain::models {

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  // Just before layer `layer`'s forward.
  virtual void beforeLayer(size_t layer) = 0;
  // Just after it, with its output; returns what the next layer gets (the same values: while
  // training, an output whose backward calls back before the layer's own backward runs).
  virtual torch::Tensor afterLayer(size_t layer, torch::Tensor out) = 0;
};

// A layer that computes with parameters another layer registers (a head tied to the token
// embedding): whoever gathers a layer's parameters gathers these with them.
class UsesSharedParameters {
 public:
  virtual ~UsesSharedParameters() = default;
  virtual std::vector<torch::Tensor> sharedParameters() const = 0;
};

}  // namespace ltrain::models
