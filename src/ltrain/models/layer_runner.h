// How a model's forward runs its layers once something is applied to it from outside, as
// torchtitan's apply_ac and fully_shard wrap a plain model's blocks: runs of repeated blocks
// recomputed in backward (train.activation_checkpointing) and calls around every layer
// (dist.zero 3's gathers). A pipeline (pipeline.h) runs each stage's layers through it too. The
// model holds at most one, and is plain without.
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <utility>
#include <vector>

#include "ltrain/models/layer_hooks.h"

namespace ltrain::models {

struct ClassifierImpl;

struct LayerRunner {
  // Runs of layers [first, second) recomputed in backward when training (activation_checkpoint.h).
  std::vector<std::pair<size_t, size_t>> checkpointed;
  // Called around every layer's forward (not under a pipeline).
  std::shared_ptr<LayerHooks> hooks;

  // Layers [begin, end) of `layers` on x; a checkpointed run is cut at `end` (a stage's).
  torch::Tensor run(torch::nn::Sequential layers, torch::Tensor x, size_t begin, size_t end,
                    bool training) const;
};

// train.activation_checkpointing: runs of `every` consecutive repeated blocks (transformer or
// residual blocks) of `model` recompute their forward in backward instead of keeping its
// activations; 0 turns it off. Returns how many runs there are.
int64_t applyActivationCheckpointing(ClassifierImpl& model, int64_t every);

// dist.zero 3: `hooks` called around each of `model`'s layers (null: none).
void setLayerHooks(ClassifierImpl& model, std::shared_ptr<LayerHooks> hooks);

}  // namespace ltrain::models
