// Sampling from a language model (gpt, llama) with a cache of keys and values: the prompt runs
// once, then each new token costs one position. Greedy at temperature 0, as transformers'
// generate(do_sample=False); otherwise temperature, top-k and top-p (nucleus) sampling, seeded.
#pragma once
#include <cstdint>
#include <vector>

#include "ltrain/models/model.h"

namespace ltrain::models {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
};

// The tokens after `prompt`. A context longer than `block_size` (the positions the model was
// trained on) slides: the cache is rebuilt from the last block_size / 2 tokens.
std::vector<int64_t> generate(Classifier& model, int64_t block_size,
                              const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              const torch::Device& device);

}  // namespace ltrain::models
