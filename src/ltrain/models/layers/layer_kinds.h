// The leaf layer kinds of model.layers (every kind but the containers, residual and
// sequential, which layer_graph.cpp builds from its own list): each checks its arguments against
// its input and gives its module and output shape.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ltrain/models/layers/layer_args.h"

namespace ltrain::models::layer_graph {

using MakeLayer = Built (*)(Args&, const LayerInput&);

// In the order the reference lists them: a new kind is one function and one row.
const std::vector<std::pair<std::string, MakeLayer>>& leafKinds();

}  // namespace ltrain::models::layer_graph
