// model.name qwen3: llama's layers with an RMSNorm over each query and key head
// (transformers' Qwen3ForCausalLM, whose parameter names they carry).
#include <torch/torch.h>

#include "ltrain/models/builder.h"
#include "ltrain/models/llama/llama.h"

namespace ltrain::models::qwen3 {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t vocab) {
    LlamaBlock block;
    block.qk_norm = true;
    return llamaLayers(cfg, shape, vocab, block);
  };
  return b;
}

}  // namespace ltrain::models::qwen3
