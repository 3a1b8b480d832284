// What llama's spec shares with the families built on its block (qwen3, mistral): its keys'
// rules, config.json in and out, FLOPs. Without torch.
#pragma once
#include <string>
#include <vector>

#include "ltrain/config/hf_config.h"
#include "ltrain/config/load.h"
#include "ltrain/io/json.h"
#include "ltrain/models/spec.h"

namespace ltrain::models::llama {

// A head's width: model.head_dim, or model.n_embd / model.n_head when it is 0.
int64_t headDim(const config::ModelConfig& m);
// llama's own keys (n_kv_head, intermediate_size, rope_theta, norm_eps, head_dim) and the
// transformer group's: what a family on llama's block takes.
std::vector<std::string> keys();
void validate(const config::LoadedConfig& lc);
void validateTensorParallel(const config::LoadedConfig& lc, int64_t n);
// config.json's fields of LlamaConfig (and of the configs that extend it); refuses what the block
// does not implement.
void importConfig(config::HfMerger& m);
// LlamaConfig's config.json under `architecture` and `model_type`.
io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions,
                      const std::string& architecture, const std::string& model_type);
// Megatron-LM's split of the block under transformers' names: q, k, v, gate and up
// column-parallel, o and down row-parallel, the vocabulary split in the embedding and the head.
std::vector<TpRule> tensorParallelPlan(const config::ModelConfig& m);
// 6N + 12 L H Q T with T the keys a query attends to (`attended`).
double flops(const config::ModelConfig& m, int64_t params, int64_t vocab, int64_t attended);

}  // namespace ltrain::models::llama
