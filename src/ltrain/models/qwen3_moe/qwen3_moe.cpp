// model.name qwen3_moe: Qwen3's layers (per-head query and key norms) whose MLP is a mixture of
// experts (transformers' Qwen3MoeForCausalLM, whose checkpoints' names they carry:
// model.layers.<i>.mlp.gate.weight, ....mlp.experts.<e>.gate_proj.weight, up_proj, down_proj).
#include <torch/torch.h>

#include "ltrain/models/builder.h"
#include "ltrain/models/llama/llama.h"

namespace ltrain::models::qwen3_moe {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t vocab) {
    LlamaBlock block;
    block.qk_norm = true;
    block.moe = {cfg.num_experts,
                 cfg.num_experts_per_tok,
                 cfg.moe_intermediate_size > 0 ? cfg.moe_intermediate_size : cfg.intermediate_size,
                 cfg.norm_topk_prob,
                 "mlp",
                 "gate_proj",
                 "up_proj",
                 "down_proj"};
    return llamaLayers(cfg, shape, vocab, block);
  };
  return b;
}

}  // namespace ltrain::models::qwen3_moe
