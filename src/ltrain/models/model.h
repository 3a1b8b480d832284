// Models by name. Every model keeps its layers in a Sequential registered as "layers", so parameter
// names read "layers.0.weight", as a PyTorch module with self.layers = nn.Sequential(...) has them.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"

namespace ltrain::models {

struct ClassifierImpl : torch::nn::Module {
  explicit ClassifierImpl(torch::nn::Sequential layers_)
      : layers(register_module("layers", layers_)) {}
  torch::Tensor forward(torch::Tensor x) {
    if (channels_last && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    return layers->forward(x);
  }
  // Converts 4-d weights to channels-last (NHWC) and makes forward() feed images that way:
  // oneDNN (CPU) and cuDNN (GPU) convolutions run faster on that layout. Values are unchanged.
  void useChannelsLast();
  torch::nn::Sequential layers;
  bool channels_last = false;
};
TORCH_MODULE(Classifier);

// Builds cfg.model for inputs of `input_shape` ([C, H, W]) and `num_classes` outputs.
// Throws UsageError when the shape does not fit the model (e.g. too many pooling stages).
Classifier build(const config::ModelConfig& cfg, const std::vector<int64_t>& input_shape,
                 int64_t num_classes);

int64_t parameterCount(const torch::nn::Module& m);

}  // namespace ltrain::models
