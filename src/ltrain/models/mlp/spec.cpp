// model.name mlp: fully connected layers over flattened inputs (mlp.cpp).
#include "ltrain/models/spec.h"
#include "ltrain/config/option_builder.h"

namespace ltrain::models::mlp {
namespace {

std::vector<config::Option> options() {
  using IntList = std::vector<int64_t>;
  return {LT_OPT(model.hidden, "hidden layer sizes", IntList{256, 128, 100}).atLeast(1)};
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"mlp", false, false, false, false, false};
  s.help = "mlp";
  s.options = options;
  return s;
}

}  // namespace ltrain::models::mlp
