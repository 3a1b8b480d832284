// In-memory classification datasets: IDX image sets (MNIST, Fashion-MNIST) and a seeded synthetic
// set for fast tests. Inputs stay in their stored dtype; the loader normalises per batch.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"

namespace ltrain::data {

// Examples that are not rows of tensors in memory (token shards, memory-mapped): the loader asks
// the source for a batch's examples. Called from the loader's threads at once.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> exampleShape() const = 0;
  // One sequence the model reads, where an example is several (a preference pair: two blocks).
  virtual std::vector<int64_t> modelInputShape() const { return exampleShape(); }
  virtual torch::ScalarType inputType() const = 0;
  // One example's targets: {} (a class) or {T} (a block's next tokens).
  virtual std::vector<int64_t> targetShape() const = 0;
  // Writes the examples at `indices` into inputs [count, exampleShape()...] of inputType() and
  // targets [count, targetShape()...] of int64, which the loader allocated (page-locked when the
  // batch goes to a GPU, so that the copy there is asynchronous and nothing is copied twice).
  virtual void gather(const int64_t* indices, int64_t count, torch::Tensor& inputs,
                      torch::Tensor& targets) const = 0;
  // Files left out of their batches (image files that do not decode under data.on_bad_image
  // skip): how many times one was drawn, and the distinct files, in the order found.
  virtual int64_t skippedDraws() const { return 0; }
  virtual std::vector<std::string> skippedFiles() const { return {}; }
  // Language-model blocks: cuts the corpus anew, the blocks starting `offset` tokens later (not
  // called while a loader runs).
  virtual void shift(int64_t offset) = 0;
  // Training images: the epoch whose augmentation draws the next batches use (not called while a
  // loader runs).
  virtual void setEpoch(int64_t /*epoch*/) {}
};

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
  // Preference pairs (data.dataset preference): an example is [2, T], the chosen sequence and the
  // rejected one, and the held-out score is DPO's loss and reward accuracy.
  bool pairs = false;
  torch::Tensor token_stream;  // text: the split's tokens, of which inputs and targets are views
  // When set, the examples come from here and inputs/targets stay empty (data.dataset tokens).
  std::shared_ptr<ExampleSource> source;
  int64_t size() const { return source ? source->size() : targets.size(0); }
  std::vector<int64_t> exampleShape() const {
    return source ? source->exampleShape() : inputs.sizes().slice(1).vec();
  }
  // What the model is built for: one sequence of a pair, else an example.
  std::vector<int64_t> modelInputShape() const {
    return source ? source->modelInputShape() : exampleShape();
  }
};

struct Splits {
  Dataset train, test;
  // What turns the model's tokens back into text, saved in the run directory for `ltrain
  // generate`: a text run's vocabulary.json, or the tokenizer.json beside token shards.
  std::string vocabulary_json;
  std::string tokenizer_file;
  // image_folder: the class folders' names, label order.
  std::vector<std::string> class_names;
};

// The directory data.path resolves to ("" -> the dataset's standard location).
std::string resolvedDataPath(const config::DataConfig& cfg);
// Throws UsageError for a missing or malformed dataset.
// Text and token shards are cut into blocks of `block_size` tokens (model.block_size); token ids
// are checked against `vocab_size` (model.vocab_size; 0: the data's own).
Splits loadDataset(const config::DataConfig& cfg, uint64_t seed, int64_t block_size = 0,
                   int64_t vocab_size = 0);
// Images [N,H,W] + labels [N] from two IDX files, checked against each other.
Dataset loadIdxPair(const std::string& images, const std::string& labels, int64_t num_classes);

}  // namespace ltrain::data
