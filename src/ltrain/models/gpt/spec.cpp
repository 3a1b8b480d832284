// model.name gpt: GPT-2's decoder (gpt.cpp), as transformers' GPT2LMHeadModel names it.
#include <fmt/format.h>

#include <cmath>

#include "ltrain/config/hf_config.h"
#include "ltrain/config/option_builder.h"
#include "ltrain/models/spec.h"
#include "ltrain/models/transformer.h"

namespace ltrain::models::gpt {
namespace {

std::vector<config::Option> options() {
  return {LT_OPT(model.gelu, "GELU exact, or tanh-approximated (GPT-2's own, gelu_new)",
                 config::Gelu::kExact)};
}

void tensorParallel(const config::LoadedConfig& lc, int64_t n) {
  tensorParallelDivides(lc, n, "model.n_head", lc.cfg.model.n_head);
}

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  m.fields({{"model.n_embd", "n_embd"},
            {"model.n_layer", "n_layer"},
            {"model.n_head", "n_head"},
            {"model.vocab_size", "vocab_size"}});
  // n_positions bounds model.block_size: a shorter block trains on the first rows of the position
  // table (export --hf then writes n_positions as the block).
  const int64_t n_positions = j.value("n_positions", int64_t{0});
  const auto& block = m.lc().cfg.model.block_size;
  if (!m.given("model.block_size"))
    m.fields({{"model.block_size", "n_positions"}});
  else if (n_positions > 0 && block > n_positions)
    throw UsageError(fmt::format("{}model.block_size {} exceeds the model's n_positions {} in '{}'",
                                 m.lc().where("model.block_size"), block, n_positions, m.file()));
  m.take("model.tie_weights", "tie_word_embeddings",
         YAML::Node(j.value("tie_word_embeddings", true)));  // GPT2Config's default
  const std::string act = j.value("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    m.take("model.gelu", "activation_function", YAML::Node("tanh"));
  else if (act == "gelu")
    m.take("model.gelu", "activation_function", YAML::Node("exact"));
  else
    m.unsupported(fmt::format("activation_function is '{}'", act));
  if (std::abs(j.value("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12)
    m.unsupported(fmt::format("layer_norm_epsilon is {}", j.value("layer_norm_epsilon", 1e-5)));
  const auto& c = m.lc().cfg.model;
  if (j.contains("n_inner") && j["n_inner"].is_number_integer() &&
      j["n_inner"].get<int64_t>() != 4 * c.n_embd)
    m.unsupported(fmt::format("n_inner is {}, not 4 x n_embd", j["n_inner"].get<int64_t>()));
  if (j.value("scale_attn_by_inverse_layer_idx", false))
    m.unsupported("scale_attn_by_inverse_layer_idx is true");
  if (j.value("reorder_and_upcast_attn", false)) m.unsupported("reorder_and_upcast_attn is true");
  if (!j.value("scale_attn_weights", true)) m.unsupported("scale_attn_weights is false");
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_embd", cfg.n_embd},
          {"n_layer", cfg.n_layer},
          {"n_head", cfg.n_head},
          {"n_positions", cfg.block_size},
          {"n_inner", nullptr},
          {"activation_function", cfg.gelu == config::Gelu::kTanh ? "gelu_new" : "gelu"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", cfg.dropout},
          {"embd_pdrop", cfg.dropout},
          {"attn_pdrop", cfg.dropout},
          {"tie_word_embeddings", cfg.tie_weights},
          {"vocab_size", vocab},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr},
          {"dtype", "float32"}};
}

// ltrain's gpt names ("layers.<i>.<rest>") as GPT2LMHeadModel's.
HfName hfName(const std::string& name, const config::ModelConfig& cfg) {
  const auto dot = name.find('.', 7);
  const int64_t i = std::stoll(name.substr(7, dot - 7));  // after "layers."
  const std::string rest = name.substr(dot + 1);
  if (i == 0) return {"transformer." + rest, false, rest == "wpe.weight"};
  if (i == cfg.n_layer + 1) return {"transformer.ln_f." + rest};
  if (i == cfg.n_layer + 2) return {"lm_head." + rest};
  const bool conv1d = rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" ||
                      rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight";
  return {fmt::format("transformer.h.{}.{}", i - 1, rest), conv1d};
}

// Megatron-LM's split of GPT-2 (layers.0 embeds, layers.1..n_layer are the blocks, then ln_f
// and the head).
std::vector<TpRule> tensorParallelPlan(const config::ModelConfig& m) {
  return {{"layers.0.wte", TpStyle::kVocabEmbedding},
          {"layers.0.wpe", TpStyle::kSequenceSlice},
          {"layers.*.attn.c_attn", TpStyle::kColwise, 3},  // q, k and v one after another
          {"layers.*.attn.c_proj", TpStyle::kRowwise},
          {"layers.*.mlp.c_fc", TpStyle::kColwise},
          {"layers.*.mlp.c_proj", TpStyle::kRowwise},
          {fmt::format("layers.{}", m.n_layer + 2), TpStyle::kVocabHead}};
}

// The positions table, and the token embedding unless the head multiplies by it, are only
// looked up.
double flops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  const int64_t lookup = m.block_size * m.n_embd + (m.tie_weights ? 0 : vocab * m.n_embd);
  return transformerFlops(m, params, lookup, m.n_embd / m.n_head, m.block_size);
}

}  // namespace

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"gpt", true, false, false, true, true};
  s.help = "gpt (GPT-2's block)";
  s.options = options;
  s.takes = transformerKeys();
  s.validate = headsDivideWidth;
  s.validate_tensor_parallel = tensorParallel;
  s.hf = {{"gpt2"}, importConfig, exportConfig, hfName, "transformer."};
  s.tensor_parallel_plan = tensorParallelPlan;
  s.flops_per_token = flops;
  return s;
}

}  // namespace ltrain::models::gpt
