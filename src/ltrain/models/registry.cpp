// Model names to builders (the list is models/families.def), and the layers they share.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "ltrain/common/errors.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/layers.h"
#include "ltrain/models/layers/layer_graph.h"
#include "ltrain/models/model.h"

namespace ltrain::models {

void appendActivation(torch::nn::Sequential& seq, config::Activation name) {
  switch (name) {
    case config::Activation::kRelu:
      seq->push_back(torch::nn::ReLU());
      return;
    case config::Activation::kGelu:
      seq->push_back(torch::nn::GELU());
      return;
    case config::Activation::kTanh:
      seq->push_back(torch::nn::Tanh());
      return;
    case config::Activation::kSigmoid:
      seq->push_back(torch::nn::Sigmoid());
      return;
  }
}

int64_t appendDense(torch::nn::Sequential& seq, int64_t in, const std::vector<int64_t>& sizes,
                    const config::ModelConfig& cfg) {
  for (auto size : sizes) {
    seq->push_back(torch::nn::Linear(in, size));
    appendActivation(seq, cfg.activation);
    if (cfg.dropout > 0) seq->push_back(torch::nn::Dropout(cfg.dropout));
    in = size;
  }
  return in;
}

Classifier imageClassifier(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                           int64_t classes,
                           torch::nn::Sequential (*layers)(const config::ModelConfig&,
                                                           const std::vector<int64_t>&, int64_t)) {
  if (shape.size() != 3)
    throw UsageError(fmt::format("model {}: expected inputs [C, H, W], got {} dimensions", cfg.name,
                                 shape.size()));
  Classifier c(layers(cfg, shape, classes));
  if (cfg.channels_last) c->useChannelsLast();
  return c;
}

Classifier build(const config::ModelConfig& cfg, const std::vector<int64_t>& input_shape,
                 int64_t num_classes, bool tokens, bool deferred) {
  const ModelBuilder& b = modelBuilder(cfg.name);
  if (!b.layers) return b.build(cfg, input_shape, num_classes, tokens);
  auto f = b.layers(cfg, input_shape, num_classes);
  return deferred ? buildDeferred(std::move(f)) : buildWhole(f);
}

std::string modelSummary(const config::ModelConfig& cfg, const std::vector<int64_t>& input_shape,
                         int64_t num_classes, bool tokens) {
  if (cfg.name == "layers") {
    torch::NoGradGuard no_grad;
    return layerSummary(buildLayerGraph(cfg.layers, input_shape, num_classes, tokens), input_shape);
  }
  auto m = build(cfg, input_shape, num_classes, tokens);
  std::string out = fmt::format("{:<40}{:>12}\n", "Parameter", "Shape");
  for (const auto& p : m->named_parameters())
    out += fmt::format("{:<40}{:>12}\n", p.key(),
                       fmt::format("[{}]", fmt::join(p.value().sizes(), ", ")));
  return out + fmt::format("Total params: {}\n", parameterCount(*m));
}

void ClassifierImpl::useChannelsLast() {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  channels_last = true;
}

int64_t parameterCount(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace ltrain::models
