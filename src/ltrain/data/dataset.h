// In-memory classification datasets: IDX image sets (MNIST, Fashion-MNIST) and a seeded synthetic
// set for fast tests. Inputs stay in their stored dtype; the loader normalises per batch.
#pragma once
#include <torch/types.h>

#include <string>

#include "ltrain/config/experiment_config.h"

namespace ltrain::data {

struct Dataset {
  torch::Tensor inputs;  // [N, C, H, W] or [N, F], uint8 (scaled by 1/255) or float32; text: [N, T]
  torch::Tensor targets;  // [N], int64
  int64_t num_classes = 0;
  float mean = 0.f, std = 1.f;  // applied after scaling: (x - mean) / std
  // Per-channel statistics instead (C values each, e.g. CIFAR's RGB); empty: the scalars above.
  std::vector<float> channel_mean, channel_std;
  // Language modelling: inputs and targets are [N, T] token ids, the loss is per token and the
  // held-out split is called validation.
  bool tokens = false;
  torch::Tensor token_stream;  // text: the split's tokens, of which inputs and targets are views
  int64_t size() const { return targets.size(0); }
  std::vector<int64_t> exampleShape() const { return inputs.sizes().slice(1).vec(); }
};

struct Splits {
  Dataset train, test;
};

// The directory data.path resolves to ("" -> the dataset's standard location).
std::string resolvedDataPath(const config::DataConfig& cfg);
// Throws UsageError for a missing or malformed dataset.
// Text is cut into blocks of `block_size` tokens (model.block_size).
Splits loadDataset(const config::DataConfig& cfg, uint64_t seed, int64_t block_size = 0);
// Images [N,H,W] + labels [N] from two IDX files, checked against each other.
Dataset loadIdxPair(const std::string& images, const std::string& labels, int64_t num_classes);

}  // namespace ltrain::data
