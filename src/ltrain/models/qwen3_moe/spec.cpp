// model.name qwen3_moe: transformers' Qwen3MoeForCausalLM, Qwen3's block whose MLP is a mixture
// of experts routed top-k (qwen3_moe.cpp, models/moe.h).
#include <fmt/format.h>

#include <algorithm>

#include "ltrain/config/option_builder.h"
#include "ltrain/models/llama/spec.h"
#include "ltrain/models/mixtral/spec.h"
#include "ltrain/models/spec.h"

namespace ltrain::models::qwen3_moe {
namespace {

std::vector<config::Option> options() {
  return {
      LT_OPT(model.moe_intermediate_size,
             "width of each expert's SwiGLU MLP; 0: model.intermediate_size", int64_t{0})
          .atLeast(0),
      LT_OPT(model.norm_topk_prob,
             "renormalise the chosen experts' probabilities to sum to 1 (Qwen3-30B-A3B: true)",
             false),
  };
}

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  if (j.value("use_sliding_window", false)) m.unsupported("use_sliding_window is true");
  if (j.value("decoder_sparse_step", int64_t{1}) != 1)
    m.unsupported(fmt::format("decoder_sparse_step is {} (dense layers between the experts')",
                              j["decoder_sparse_step"].dump()));
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() &&
      !j["mlp_only_layers"].empty())
    m.unsupported(fmt::format("mlp_only_layers holds {}", j["mlp_only_layers"].dump()));
  // The hub's files say num_experts; transformers 5 writes num_local_experts.
  mixtral::importRouter(m, j.contains("num_experts") ? "num_experts" : "num_local_experts");
  m.fields({{"model.moe_intermediate_size", "moe_intermediate_size"},
            {"model.norm_topk_prob", "norm_topk_prob"}});
  llama::importConfig(m);
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions) {
  auto c = llama::exportConfig(cfg, vocab, max_positions, "Qwen3MoeForCausalLM", "qwen3_moe");
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = io::Json::array();
  c["moe_intermediate_size"] =
      cfg.moe_intermediate_size > 0 ? cfg.moe_intermediate_size : cfg.intermediate_size;
  c["norm_topk_prob"] = cfg.norm_topk_prob;
  mixtral::exportRouter(cfg, c, "num_experts");
  return c;
}

double flops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  return mixtral::flops(
      m, params, vocab, m.block_size,
      m.moe_intermediate_size > 0 ? m.moe_intermediate_size : m.intermediate_size);
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"qwen3_moe", true, false, false, false, false};
  s.traits.mixture_of_experts = true;
  s.help = "qwen3_moe (Qwen3-MoE's: qwen3's block with a mixture of experts)";
  s.options = options;
  s.takes = mixtral::keys();
  s.validate = mixtral::validate;
  s.hf = {{"qwen3_moe"}, importConfig, exportConfig, nullptr, ""};
  s.flops_per_token = flops;
  return s;
}

}  // namespace ltrain::models::qwen3_moe
