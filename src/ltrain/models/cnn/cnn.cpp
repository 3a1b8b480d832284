// Convolutional classifier: blocks of conv [-> batch norm] -> activation [-> 2x2 pool], then
// fully connected layers. With batch norm the conv has no bias (the norm's shift replaces it).
#include <fmt/format.h>
#include <torch/torch.h>

#include "ltrain/common/errors.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layers.h"

namespace ltrain::models {

torch::nn::Sequential buildCnn(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                               int64_t num_classes) {
  torch::nn::Sequential seq;
  int64_t c = shape[0], h = shape[1], w = shape[2];
  for (auto out : cfg.channels) {
    seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(c, out, cfg.kernel_size)
                                         .padding(cfg.kernel_size / 2)
                                         .bias(!cfg.batch_norm)));
    if (cfg.batch_norm) seq->push_back(torch::nn::BatchNorm2d(out));
    appendActivation(seq, cfg.activation);
    if (cfg.pool != config::Pool::kNone) {
      if (h < 2 || w < 2)
        throw UsageError(
            fmt::format("model.channels: {} pooled conv blocks need inputs of at least "
                        "{} pixels a side, the data has {}x{}",
                        cfg.channels.size(), 1 << cfg.channels.size(), shape[1], shape[2]));
      if (cfg.pool == config::Pool::kMax)
        seq->push_back(torch::nn::MaxPool2d(2));
      else
        seq->push_back(torch::nn::AvgPool2d(2));
      h /= 2, w /= 2;
    }
    c = out;
  }
  seq->push_back(torch::nn::Flatten());
  const int64_t width = appendDense(seq, c * h * w, cfg.fc, cfg);
  seq->push_back(torch::nn::Linear(width, num_classes));
  return seq;
}

}  // namespace ltrain::models

namespace ltrain::models::cnn {

ModelBuilder builder() {
  ModelBuilder b;
  b.build = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t classes,
               bool) { return imageClassifier(cfg, shape, classes, buildCnn); };
  return b;
}

}  // namespace ltrain::models::cnn
