// Models by name. Every model keeps its layers in a Sequential registered as "layers", so parameter
// names read "layers.0.weight", as a PyTorch module with self.layers = nn.Sequential(...) has them.
#pragma once
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/deferred_values.h"
#include "ltrain/models/layer_hooks.h"
#include "ltrain/models/layer_runner.h"
#include "ltrain/models/pipeline.h"

namespace ltrain::models {

struct TensorParallelism;  // models/tensor_parallel.h

// A PyTorch module saved with TorchScript, run as the model (models/torchscript.cpp).
class ScriptedModel {
 public:
  virtual ~ScriptedModel() = default;
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  virtual void train(bool on) = 0;
};

// Cloneable so that dist.strategy=dp can replicate it onto every GPU (torch::nn::parallel).
struct ClassifierImpl : torch::nn::Cloneable<ClassifierImpl> {
  explicit ClassifierImpl(torch::nn::Sequential layers_)
      : layers(register_module("layers", layers_)) {}
  // model.name torchscript: the module's parameters and buffers are registered here under their
  // own names (its submodules mirrored), and forward runs the TorchScript module.
  explicit ClassifierImpl(std::shared_ptr<ScriptedModel> scripted)
      : scripted(std::move(scripted)) {}
  // A model whose parameters carry another framework's names (llama: Hugging Face's,
  // model.layers.0.self_attn.q_proj.weight): `layers_` runs it, unregistered; `named` registers
  // the same modules under those names; `prefixes[i]` is layer i's ("model.layers.0.").
  ClassifierImpl(torch::nn::Sequential layers_,
                 std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> named,
                 std::vector<std::string> prefixes)
      : layers(std::move(layers_)), layer_prefixes(std::move(prefixes)) {
    for (auto& [name, m] : named) register_module(name, m);
  }
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    if (scripted) scripted->train(on);
  }
  // A clone registers an empty Sequential here, which Cloneable then fills with the clone of
  // every layer.
  void reset() override {
    TORCH_CHECK(!scripted, "a TorchScript model cannot be replicated (dist.strategy dp)");
    TORCH_CHECK(layer_prefixes.empty(), "this model cannot be replicated (dist.strategy dp)");
    layers = register_module("layers", torch::nn::Sequential());
  }
  torch::Tensor forward(torch::Tensor x) {
    if (scripted) return scripted->forward(x);
    if (channels_last && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    if (pipeline) return pipeline->forward(*this, x);
    if (!runner) return layers->forward(x);
    return runner->run(layers, x, 0, layers->size(), is_training());
  }
  // Layers [begin, end) on x, as the runner applied from outside runs them (a pipeline's stage).
  torch::Tensor runLayers(torch::Tensor x, size_t begin, size_t end) {
    return (runner ? *runner : LayerRunner{}).run(layers, x, begin, end, is_training());
  }
  // Converts 4-d weights to channels-last (NHWC) and makes forward() feed images that way:
  // oneDNN (CPU) and cuDNN (GPU) convolutions run faster on that layout. Values are unchanged.
  void useChannelsLast();
  // Each pipeline stage's parameters (under the model's names) and buffers, first stage first;
  // without a pipeline one entry holding the whole model. Gradient synchronisation keeps one
  // communicator per stage device.
  struct StageTensors {
    torch::Device device{torch::kCPU};
    std::vector<std::pair<std::string, torch::Tensor>> params;
    std::vector<torch::Tensor> buffers;
  };
  std::vector<StageTensors> stageTensors() const;
  // The parameters layer i computes with: its own and those it shares with another layer.
  std::vector<torch::Tensor> layerParameters(size_t i) const {
    auto params = layers->ptr(i)->parameters();
    if (const auto* user = dynamic_cast<const UsesSharedParameters*>(layers->ptr(i).get()))
      for (auto& p : user->sharedParameters()) params.push_back(p);
    return params;
  }
  // The parameter-name prefix of layer i: "layers.<i>." unless the model names them otherwise.
  std::string layerPrefix(size_t i) const {
    return layer_prefixes.empty() ? "layers." + std::to_string(i) + "." : layer_prefixes[i];
  }
  torch::nn::Sequential layers{nullptr};
  std::vector<std::string> layer_prefixes;
  std::shared_ptr<ScriptedModel> scripted;
  bool channels_last = false;
  // Applied from outside the model: how forward runs its layers (activation checkpointing,
  // dist.zero 3's hooks: layer_runner.h), and the pipeline its stages form (pipeline.h).
  std::shared_ptr<LayerRunner> runner;
  std::shared_ptr<Pipeline> pipeline;
  // Set when the parameters were made without memory (build(.., deferred)): their values, a layer
  // at a time, for the plan that shards them.
  std::shared_ptr<DeferredValues> deferred;
  // dist.tensor_parallel: this rank's part of each split parameter, and how to make, gather and
  // slice them (models/tensor_parallel.h).
  std::shared_ptr<TensorParallelism> tp;
};
TORCH_MODULE(Classifier);

// Builds cfg.model for inputs of `input_shape` (one example: [C, H, W], [F], or [T] token ids
// when `tokens`) and `num_classes` outputs (the vocabulary for tokens). Throws UsageError when the
// shape does not fit the model (too many pooling stages, a layer graph that does not fit).
// `deferred` (dist.zero 3): gpt and llama are made with parameters that have no memory and
// model->deferred set (models/layerwise.h); other families are built whole.
Classifier build(const config::ModelConfig& cfg, const std::vector<int64_t>& input_shape,
                 int64_t num_classes, bool tokens = false, bool deferred = false);

// model.name torchscript (models/torchscript.cpp): UsageError for a file that is no TorchScript
// archive, a module without parameters, or one whose forward takes other arguments or gives
// other than [batch, classes] ([batch, T, vocabulary] for tokens).
Classifier loadTorchScript(const std::string& path, const std::vector<int64_t>& input_shape,
                           int64_t num_classes, bool tokens);

// One line per layer (layer graphs) or a line for the whole (other families), for the log and
// `ltrain config --model`.
std::string modelSummary(const config::ModelConfig& cfg, const std::vector<int64_t>& input_shape,
                         int64_t num_classes, bool tokens);

int64_t parameterCount(const torch::nn::Module& m);

}  // namespace ltrain::models
