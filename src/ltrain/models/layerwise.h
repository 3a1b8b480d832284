// A model family written as its layers' constructors and its initialisation of each layer, so that
// it can be built whole, or deferred: every parameter made with its shape but no memory, and each
// layer's values made again later, one layer at a time, when dist.zero 3 shards it. The deferred
// values are the whole build's bit for bit: the random generator is put back, per layer, where the
// whole build had it before that layer's constructor and before its initialisation (as torchtitan
// builds on the meta device and initialises each FSDP unit where it lives).
#pragma once
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ltrain/models/model.h"

namespace ltrain::models {

struct Layerwise {
  // Layer i's constructor; `built` holds layers 0..i-1 (a tied head refers to the embedding).
  std::vector<std::function<torch::nn::AnyModule(const torch::nn::Sequential& built)>> layers;
  // The family's initialisation of layer i's own parameters, after every constructor ran (in the
  // whole build, layer by layer in order). Empty: the constructors' values stay.
  std::function<void(size_t, torch::nn::Module&)> init;
  // The model around the layers (llama registers them under transformers' names); empty: plain.
  std::function<Classifier(torch::nn::Sequential)> wrap;
};

// Every constructor, then every layer's initialisation.
Classifier buildWhole(const Layerwise& family);
// Parameters without memory (common/tensor_storage.h); model->deferred makes their values. The
// random generator ends where the whole build leaves it. Peak memory: about one layer.
Classifier buildDeferred(Layerwise family);

// Moves a deferred model's buffers to `device` and makes its parameters there, still without
// memory.
void placeDeferred(Classifier& model, torch::Device device);

}  // namespace ltrain::models
