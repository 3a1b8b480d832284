// model.name mistral: llama's layers whose attention sees the last model.sliding_window keys
// (transformers' MistralForCausalLM, whose parameter names they carry).
#include <torch/torch.h>

#include "ltrain/models/builder.h"
#include "ltrain/models/llama/llama.h"

namespace ltrain::models::mistral {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t vocab) {
    LlamaBlock block;
    block.sliding_window = cfg.sliding_window;
    return llamaLayers(cfg, shape, vocab, block);
  };
  return b;
}

}  // namespace ltrain::models::mistral
