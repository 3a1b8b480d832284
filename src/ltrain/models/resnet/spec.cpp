// model.name resnet: ResNet-18/34, CIFAR's stem or torchvision's (resnet.cpp).
#include "ltrain/models/spec.h"
#include "ltrain/config/option_builder.h"

namespace ltrain::models::resnet {
namespace {

std::vector<config::Option> options() {
  using S = std::string;
  return {
      LT_OPT(model.depth, "18 or 34 layers (basic blocks 2-2-2-2 or 3-4-6-3)", int64_t{18}),
      LT_OPT(model.stem,
             "cifar (a 3x3 stride-1 conv: small images), imagenet (torchvision's 7x7 "
             "stride-2 conv and 3x3 stride-2 max-pool: photos), or auto (imagenet for images of "
             "128 pixels a side or more)",
             S("auto"))
          .oneOf({"auto", "cifar", "imagenet"}),
      LT_OPT(model.width, "channels of the first stage (doubled at each of the next three)",
             int64_t{64})
          .atLeast(1),
  };
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"resnet", false, false, true, true, false};
  s.help = "resnet";
  s.options = options;
  return s;
}

}  // namespace ltrain::models::resnet
