// Llama's decoder as a family's layers (llama.cpp), and what the families built on its block
// change in it: Qwen3's per-head query and key norms, Mistral's sliding window, Mixtral's and
// Qwen3-MoE's routed experts.
#pragma once
#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/layerwise.h"
#include "ltrain/models/moe.h"

namespace ltrain::models {

struct LlamaBlock {
  bool qk_norm = false;        // an RMSNorm over each query and key head before the rotation
  int64_t sliding_window = 0;  // keys a query sees, itself included; 0: all before it
  MoeShape moe;                // experts > 0: the feed-forward layer is a mixture of experts
};

// Named as transformers' LlamaForCausalLM (Qwen3ForCausalLM, MistralForCausalLM: the same
// names).
Layerwise llamaLayers(const config::ModelConfig&, const std::vector<int64_t>& input_shape,
                      int64_t vocab, LlamaBlock block);

}  // namespace ltrain::models
