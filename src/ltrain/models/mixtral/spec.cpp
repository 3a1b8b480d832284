// model.name mixtral: transformers' MixtralForCausalLM, llama's block (with Mistral's sliding
// window) whose MLP is a mixture of experts routed top-k (mixtral.cpp, models/moe.h).
#include "ltrain/models/mixtral/spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "ltrain/config/option_builder.h"
#include "ltrain/config/validate.h"
#include "ltrain/models/llama/spec.h"

namespace ltrain::models::mixtral {
namespace {

std::vector<config::Option> options() {
  return {
      LT_OPT(model.num_experts, "experts of each mixture-of-experts layer (Mixtral 8x7B: 8)",
             int64_t{8})
          .atLeast(1),
      LT_OPT(model.num_experts_per_tok,
             "experts each token is routed to (top-k of the router's probabilities)", int64_t{2})
          .atLeast(1),
      LT_OPT(model.router_aux_loss_coef,
             "weight of the routers' load-balancing loss in the training loss (transformers' "
             "router_aux_loss_coef)",
             0.001)
          .atLeast(0.0),
      LT_OPT(model.output_router_logits,
             "add the routers' load-balancing loss, times model.router_aux_loss_coef, to the "
             "training loss, as transformers does when output_router_logits is true; "
             "metrics.jsonl reports it either way",
             false),
  };
}

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  if (j.contains("sliding_window") && !j["sliding_window"].is_null())
    m.take("model.sliding_window", "sliding_window", config::hfValue(j["sliding_window"]));
  importRouter(m, "num_local_experts");
  llama::importConfig(m);
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions) {
  auto c = llama::exportConfig(cfg, vocab, max_positions, "MixtralForCausalLM", "mixtral");
  c["sliding_window"] = cfg.sliding_window > 0 ? io::Json(cfg.sliding_window) : io::Json(nullptr);
  c["router_jitter_noise"] = 0.0;
  exportRouter(cfg, c, "num_local_experts");
  return c;
}

double mixtralFlops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  const int64_t t = m.sliding_window > 0 ? std::min(m.sliding_window, m.block_size) : m.block_size;
  return flops(m, params, vocab, t, m.intermediate_size);
}

}  // namespace

std::vector<std::string> keys() {
  std::vector<std::string> out = llama::keys();
  for (const auto& o : options()) out.push_back(o.path);
  return out;
}

void validate(const config::LoadedConfig& lc) {
  llama::validate(lc);
  const auto& c = lc.cfg;
  const auto& m = c.model;
  if (m.num_experts_per_tok > m.num_experts)
    config::refuse(lc, config::setOne(lc, "model.num_experts_per_tok", "model.num_experts"),
                   fmt::format("model.num_experts_per_tok ({}) exceeds model.num_experts ({}): a "
                               "token is routed to that many of the experts",
                               m.num_experts_per_tok, m.num_experts));
  auto no = [&](const std::string& key, const std::string& why) {
    config::refuse(lc, config::setOne(lc, key, "model.name"),
                   fmt::format("model.name {} {}", m.name, why));
  };
  // The routers' loss is gathered on the thread that runs the whole forward.
  if (m.placement == config::Placement::kPipeline)
    no("model.placement", "does not combine with model.placement pipeline yet");
  if (c.finetune.method == "dpo")
    no("finetune.method", "does not combine with finetune.method dpo yet");
  if (c.dist.strategy == config::Strategy::kDp)
    no("dist.strategy", "needs one process per device (dist.strategy ddp), not dp");
}

void importRouter(config::HfMerger& m, const char* experts_field) {
  const auto& j = m.json();
  if (j.value("router_jitter_noise", 0.0) != 0.0)
    m.unsupported(fmt::format("router_jitter_noise is {}", j["router_jitter_noise"].dump()));
  m.fields(
      {{"model.num_experts", experts_field}, {"model.num_experts_per_tok", "num_experts_per_tok"}});
  // How the routers' loss joins training is a choice of the run, which the YAML may change.
  for (const auto& [path, field] :
       {std::pair{"model.router_aux_loss_coef", "router_aux_loss_coef"},
        std::pair{"model.output_router_logits", "output_router_logits"}})
    if (!m.given(path) && j.contains(field) && !j[field].is_null())
      m.take(path, field, config::hfValue(j[field]));
}

void exportRouter(const config::ModelConfig& cfg, io::Json& c, const char* experts_field) {
  c[experts_field] = cfg.num_experts;
  c["num_experts_per_tok"] = cfg.num_experts_per_tok;
  c["router_aux_loss_coef"] = cfg.router_aux_loss_coef;
  c["output_router_logits"] = cfg.output_router_logits;
}

double flops(const config::ModelConfig& m, int64_t params, int64_t vocab, int64_t attended,
             int64_t width) {
  // The experts a token does not reach cost it nothing.
  const int64_t idle = m.n_layer * (m.num_experts - m.num_experts_per_tok) * 3 * m.n_embd * width;
  return llama::flops(m, params - idle, vocab, attended);
}

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"mixtral", true, false, false, false, false};
  s.traits.mixture_of_experts = true;
  s.help = "mixtral (Mixtral's: llama's block with a mixture of experts and a sliding window)";
  s.options = options;
  s.takes = llama::keys();
  s.takes.push_back("model.sliding_window");
  s.validate = validate;
  s.hf = {{"mixtral"}, importConfig, exportConfig, nullptr, ""};
  s.flops_per_token = mixtralFlops;
  return s;
}

}  // namespace ltrain::models::mixtral
