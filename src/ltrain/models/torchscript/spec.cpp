// model.name torchscript: a PyTorch module saved with TorchScript (torchscript.cpp).
#include "ltrain/models/spec.h"
#include "ltrain/config/option_builder.h"

namespace ltrain::models::torchscript {
namespace {

std::vector<config::Option> options() {
  using S = std::string;
  return {LT_OPT(model.path,
                 "the module file, made by torch.jit.script(module).save(path) (or "
                 "torch.jit.trace)",
                 S(""))};
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"torchscript", false, true, false, false, false};
  s.help = "torchscript (a PyTorch module saved with TorchScript, model.path)";
  s.options = options;
  return s;
}

}  // namespace ltrain::models::torchscript
