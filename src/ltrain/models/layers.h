// Building blocks shared by the model families (internal to src/ltrain/models).
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/layerwise.h"
#include "ltrain/models/model.h"

namespace ltrain::models {

void appendActivation(torch::nn::Sequential& seq, config::Activation name);
// Linear -> activation [-> dropout] for each of `sizes`, from `in` features; returns the last
// width.
int64_t appendDense(torch::nn::Sequential& seq, int64_t in, const std::vector<int64_t>& sizes,
                    const config::ModelConfig& cfg);
torch::nn::Sequential buildMlp(const config::ModelConfig&, const std::vector<int64_t>&, int64_t);
torch::nn::Sequential buildCnn(const config::ModelConfig&, const std::vector<int64_t>&, int64_t);
Layerwise gptLayers(const config::ModelConfig&, const std::vector<int64_t>&, int64_t);
torch::nn::Sequential buildResnet(const config::ModelConfig&, const std::vector<int64_t>&, int64_t);
// cnn's and resnet's model: images [C, H, W] only (UsageError naming the family otherwise),
// channels-last where model.channels_last asks.
Classifier imageClassifier(const config::ModelConfig&, const std::vector<int64_t>& shape,
                           int64_t classes,
                           torch::nn::Sequential (*layers)(const config::ModelConfig&,
                                                           const std::vector<int64_t>&, int64_t));

}  // namespace ltrain::models
