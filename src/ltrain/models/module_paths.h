// The walk the passes applied from outside share (tensor parallelism's parallelize(), LoRA's
// applyLora()): every module of a model under the path its parameters are named by, as PyTorch's
// named_modules() gives them ("model.layers.0.self_attn.q_proj").
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <string>

#include "ltrain/models/model.h"

namespace ltrain::models {

// Each module of each of the model's layers, under the layer's parameter prefix.
void forEachModule(const Classifier& model,
                   const std::function<void(const std::string& path, torch::nn::Module&)>& visit);

// Whether `path` is `pattern`, where a "*" element of the pattern stands for any one element.
bool pathMatches(const std::string& pattern, const std::string& path);

}  // namespace ltrain::models
