// model.name layers: a network written in model.layers (layer_graph.cpp).
#include "ltrain/models/spec.h"
#include "ltrain/config/option_builder.h"

namespace ltrain::models::layers {
namespace {

std::vector<config::Option> options() {
  return {LT_OPT(model.layers,
                 "the network, a list of layers (conv2d: {out: 32, kernel: 3}, relu, "
                 "residual: [...], linear: {out: 10}, ...); input sizes come from the data (see "
                 "README: Your own model)",
                 std::vector<config::LayerSpec>{})};
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"layers", false, true, false, false, false, /*layer_summary=*/true};
  s.help = "layers (a network written in model.layers)";
  s.options = options;
  return s;
}

}  // namespace ltrain::models::layers
