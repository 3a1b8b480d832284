// model.name mixtral: llama's layers with Mistral's sliding window, whose MLP is a mixture of
// experts (transformers' MixtralForCausalLM, whose checkpoints' parameter names they carry:
// model.layers.<i>.block_sparse_moe.gate.weight, ....experts.<e>.w1.weight, w3 the up and w2 the
// down projection).
#include <torch/torch.h>

#include "ltrain/models/builder.h"
#include "ltrain/models/llama/llama.h"

namespace ltrain::models::mixtral {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t vocab) {
    LlamaBlock block;
    block.sliding_window = cfg.sliding_window;
    block.moe.experts = cfg.num_experts;
    block.moe.top_k = cfg.num_experts_per_tok;
    block.moe.width = cfg.intermediate_size;  // Mixtral's experts are intermediate_size wide
    return llamaLayers(cfg, shape, vocab, block);
  };
  return b;
}

}  // namespace ltrain::models::mixtral
