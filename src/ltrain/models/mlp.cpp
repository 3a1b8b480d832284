// Multi-layer perceptron: flatten, then Linear -> activation [-> dropout] per hidden size.
#include <torch/torch.h>

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
