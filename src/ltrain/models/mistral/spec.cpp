// model.name mistral: transformers' MistralForCausalLM, llama's block whose attention may see
// only the last model.sliding_window keys (mistral.cpp).
#include <fmt/format.h>

#include <algorithm>

#include "ltrain/config/option_builder.h"
#include "ltrain/models/llama/spec.h"
#include "ltrain/models/spec.h"

namespace ltrain::models::mistral {
namespace {

std::vector<config::Option> options() {
  return {LT_OPT(model.sliding_window,
                 "each query attends to the last this many positions, itself included "
                 "(Mistral 7B v0.1: 4096); 0: to all before it",
                 int64_t{0})
              .atLeast(0)};
}

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  if (j.contains("sliding_window") && !j["sliding_window"].is_null())
    m.take("model.sliding_window", "sliding_window", config::hfValue(j["sliding_window"]));
  llama::importConfig(m);
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions) {
  auto c = llama::exportConfig(cfg, vocab, max_positions, "MistralForCausalLM", "mistral");
  c["sliding_window"] = cfg.sliding_window > 0 ? io::Json(cfg.sliding_window) : io::Json(nullptr);
  return c;
}

// A query attends to at most sliding_window keys.
double flops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  const int64_t t = m.sliding_window > 0 ? std::min(m.sliding_window, m.block_size) : m.block_size;
  return llama::flops(m, params, vocab, t);
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"mistral", true, false, false, true, true};
  s.help = "mistral (llama's block with sliding-window attention)";
  s.options = options;
  s.takes = llama::keys();
  s.validate = llama::validate;
  s.validate_tensor_parallel = llama::validateTensorParallel;
  s.hf = {{"mistral"}, importConfig, exportConfig, nullptr, ""};
  s.tensor_parallel_plan = llama::tensorParallelPlan;
  s.flops_per_token = flops;
  return s;
}

}  // namespace ltrain::models::mistral
