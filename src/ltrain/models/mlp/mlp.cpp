// Multi-layer perceptron: flatten, then Linear -> activation [-> dropout] per hidden size.
#include <fmt/format.h>
#include <torch/torch.h>

#include "ltrain/common/errors.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layers.h"

namespace ltrain::models {

torch::nn::Sequential buildMlp(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                               int64_t num_classes) {
  torch::nn::Sequential seq;
  seq->push_back(torch::nn::Flatten());
  int64_t in = 1;
  for (auto d : shape) in *= d;
  const int64_t width = appendDense(seq, in, cfg.hidden, cfg);
  seq->push_back(torch::nn::Linear(width, num_classes));
  return seq;
}

}  // namespace ltrain::models

namespace ltrain::models::mlp {

ModelBuilder builder() {
  ModelBuilder b;
  // The MLP flattens whatever it gets: images, or a table's feature vectors.
  b.build = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t classes,
               bool) {
    if (shape.empty())
      throw UsageError("model mlp: expected inputs [C, H, W] or [F], got 0 dimensions");
    return Classifier(buildMlp(cfg, shape, classes));
  };
  return b;
}

}  // namespace ltrain::models::mlp
