// model.name cnn: conv blocks, then fully connected layers (cnn.cpp).
#include "ltrain/models/spec.h"
#include "ltrain/config/option_builder.h"

namespace ltrain::models::cnn {
namespace {

std::vector<config::Option> options() {
  using IntList = std::vector<int64_t>;
  return {
      LT_OPT(model.channels, "output channels of each conv block", IntList{32, 64}).atLeast(1),
      LT_OPT(model.kernel_size, "conv kernel size (odd; 'same' padding)", int64_t{3}).atLeast(1),
      LT_OPT(model.pool, "2x2 pooling after each conv block", config::Pool::kMax),
      LT_OPT(model.batch_norm, "batch norm after each conv", true),
      LT_OPT(model.channels_last,
             "keep images and conv weights channels-last (NHWC); often faster with cuDNN, "
             "measured slower on "
             "this project's 2-core CPU (bench/RESULTS.md)",
             false),
      LT_OPT(model.fc, "fully connected layer sizes before the classifier", IntList{128})
          .atLeast(1),
  };
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"cnn", false, false, true, false, false};
  s.help = "cnn";
  s.options = options;
  return s;
}

}  // namespace ltrain::models::cnn
