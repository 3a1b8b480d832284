// model.name qwen3: transformers' Qwen3ForCausalLM, llama's block with an RMSNorm over each
// query and key head before the rotation (qwen3.cpp).
#include <fmt/format.h>

#include "ltrain/models/llama/spec.h"
#include "ltrain/models/spec.h"

namespace ltrain::models::qwen3 {
namespace {

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  // Qwen3's sliding window applies to the layers from max_window_layers on, when
  // use_sliding_window is true; every layer attends to all keys otherwise.
  if (j.value("use_sliding_window", false)) m.unsupported("use_sliding_window is true");
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"])
      if (t != "full_attention") m.unsupported(fmt::format("layer_types holds {}", t.dump()));
  llama::importConfig(m);
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions) {
  auto c = llama::exportConfig(cfg, vocab, max_positions, "Qwen3ForCausalLM", "qwen3");
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = cfg.n_layer;
  c["layer_types"] = std::vector<std::string>(static_cast<size_t>(cfg.n_layer), "full_attention");
  return c;
}

double flops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  return llama::flops(m, params, vocab, m.block_size);
}

}  // namespace

// llama's, and the per-head norms: each rank normalises its own heads, so their gradients are
// partial.
std::vector<TpRule> tensorParallelPlan(const config::ModelConfig& m) {
  auto plan = llama::tensorParallelPlan(m);
  plan.push_back({"model.layers.*.self_attn.q_norm", TpStyle::kPartialGradient});
  plan.push_back({"model.layers.*.self_attn.k_norm", TpStyle::kPartialGradient});
  return plan;
}

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"qwen3", true, false, false, true, true};
  s.help = "qwen3 (llama's block with RMSNorm on each query and key head)";
  s.takes = llama::keys();
  s.validate = llama::validate;
  s.validate_tensor_parallel = llama::validateTensorParallel;
  s.hf = {{"qwen3"}, importConfig, exportConfig, nullptr, ""};
  s.tensor_parallel_plan = tensorParallelPlan;
  s.flops_per_token = flops;
  return s;
}

}  // namespace ltrain::models::qwen3
