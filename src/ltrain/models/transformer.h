// What the transformer families (gpt, llama, qwen3, mistral) share in their specs, without torch:
// the keys every one of them takes, their rules, and the FLOPs estimate.
#pragma once
#include <string>
#include <vector>

#include "ltrain/config/load.h"
#include "ltrain/config/schema.h"

namespace ltrain::models {

// model.n_layer, n_head, n_embd, block_size, tie_weights, vocab_size.
std::vector<config::Option> transformerOptions();
// Their paths, for a spec's `takes`.
std::vector<std::string> transformerKeys();

// model.n_embd a multiple of model.n_head (each head n_embd / n_head wide).
void headsDivideWidth(const config::LoadedConfig& lc);
// dist.tensor_parallel `n` dividing `key`'s value `v` (each rank holds whole heads).
void tensorParallelDivides(const config::LoadedConfig& lc, int64_t n, const std::string& key,
                           int64_t v);

// Training FLOPs per token, nanoGPT's estimate: 6 N + 12 L H Q T, N without the tables that are
// only looked up (`lookup_only` parameters: positions, an untied embedding), Q a head's width,
// T the keys a query attends to.
double transformerFlops(const config::ModelConfig& m, int64_t params, int64_t lookup_only,
                        int64_t head_dim, int64_t attended);

}  // namespace ltrain::models
