// model.name layers: a network written in the config (model.layers), built in the "layers"
// Sequential with the input size of each layer inferred from the data's shape, as nn.Lazy*
// modules would, so that a user writes only what they choose. Parameter names are those of the
// same nn.Sequential in Python ("layers.3.weight", "layers.4.0.weight" inside a residual), as
// bench/reference/layers_ref.py builds it from the same YAML.
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include <string>
#include <vector>

#include "ltrain/common/errors.h"
#include "ltrain/config/experiment_config.h"

namespace ltrain::models {

// A layer that does not fit, by its path and line: "model.layers[7] (linear): input has 6272
// features per example, but in: 800 was given".
struct LayerError : UsageError {
  LayerError(const std::string& what, int line) : UsageError(what), line(line) {}
  int line;
};

// One line of the summary, as torchinfo prints it: type:depth-index, output shape, parameters.
struct LayerRow {
  std::string type;
  int depth = 1, index = 1;
  std::vector<int64_t> shape;  // per example
  int64_t params = 0;
  bool container = false;
};

struct LayerGraph {
  torch::nn::Sequential seq;
  std::vector<LayerRow> rows;
};

// `input_shape`: one example ([C, H, W], [F], or [T] token ids for `tokens`); the network must
// end in [classes] (or [T, classes] for tokens).
LayerGraph buildLayerGraph(const std::vector<config::LayerSpec>& layers,
                           const std::vector<int64_t>& input_shape, int64_t classes, bool tokens);

// The table `ltrain config --model` and the start-up log print.
std::string layerSummary(const LayerGraph& g, const std::vector<int64_t>& input_shape);

// The layer types, for messages and the README.
const std::vector<std::string>& layerTypes();

}  // namespace ltrain::models
