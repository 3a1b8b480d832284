// model.name llama: Llama's decoder (llama.cpp), as transformers' LlamaForCausalLM names it.
#include "ltrain/models/llama/spec.h"

#include <fmt/format.h>

#include "ltrain/config/option_builder.h"
#include "ltrain/config/validate.h"
#include "ltrain/models/spec.h"
#include "ltrain/models/transformer.h"

namespace ltrain::models::llama {
namespace {

std::vector<config::Option> options() {
  return {
      LT_OPT(model.n_kv_head,
             "key/value heads, dividing model.n_head (grouped-query attention); 0: model.n_head",
             int64_t{0})
          .atLeast(0),
      LT_OPT(model.intermediate_size, "width of the SwiGLU MLP", int64_t{352}).atLeast(1),
      LT_OPT(model.rope_theta, "base of the rotary position embedding", 10000.0).positive(),
      LT_OPT(model.norm_eps, "RMSNorm epsilon", 1e-5).positive(),
      LT_OPT(model.head_dim,
             "width of one attention head (even); 0: model.n_embd / model.n_head (Qwen3's are "
             "wider than that)",
             int64_t{0})
          .atLeast(0),
  };
}

double llamaFlops(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  return flops(m, params, vocab, m.block_size);
}

io::Json llamaConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions) {
  return exportConfig(cfg, vocab, max_positions, "LlamaForCausalLM", "llama");
}

}  // namespace

int64_t headDim(const config::ModelConfig& m) {
  return m.head_dim > 0 ? m.head_dim : m.n_embd / m.n_head;
}

std::vector<std::string> keys() {
  std::vector<std::string> out = transformerKeys();
  for (const auto& o : options()) out.push_back(o.path);
  return out;
}

void validate(const config::LoadedConfig& lc) {
  const auto& m = lc.cfg.model;
  if (m.head_dim == 0) headsDivideWidth(lc);
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
    config::refuse(lc, config::setOne(lc, "model.n_kv_head", "model.n_head"),
                   fmt::format("model.n_head ({}) must be a multiple of model.n_kv_head ({}): each "
                               "key/value head serves a group of query heads",
                               m.n_head, m.n_kv_head));
  if (m.head_dim > 0 && m.head_dim % 2 != 0)
    config::refuse(lc, "model.head_dim",
                   fmt::format("{}: model.head_dim ({}) must be even for rotary embeddings", m.name,
                               m.head_dim));
  if (m.head_dim == 0 && (m.n_embd / m.n_head) % 2 != 0)
    config::refuse(lc, config::setOne(lc, "model.n_head", "model.n_embd"),
                   fmt::format("{}: the head size model.n_embd / model.n_head ({} / {} = {}) must "
                               "be even for rotary embeddings",
                               m.name, m.n_embd, m.n_head, m.n_embd / m.n_head));
}

void validateTensorParallel(const config::LoadedConfig& lc, int64_t n) {
  const auto& m = lc.cfg.model;
  tensorParallelDivides(lc, n, "model.n_head", m.n_head);
  if (m.n_kv_head > 0) tensorParallelDivides(lc, n, "model.n_kv_head", m.n_kv_head);
  tensorParallelDivides(lc, n, "model.intermediate_size", m.intermediate_size);
}

void importConfig(config::HfMerger& m) {
  const auto& j = m.json();
  m.fields({{"model.n_embd", "hidden_size"},
            {"model.n_layer", "num_hidden_layers"},
            {"model.n_head", "num_attention_heads"},
            {"model.n_kv_head", "num_key_value_heads"},
            {"model.intermediate_size", "intermediate_size"},
            {"model.norm_eps", "rms_norm_eps"},
            {"model.vocab_size", "vocab_size"},
            {"model.rope_theta", "rope_theta"}});
  // transformers 5 keeps rope_theta in rope_parameters; a rope_type other than default scales
  // positions (Llama 3.1's "llama3", YaRN), which ltrain does not.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const auto& rp = j["rope_parameters"];
    if (rp.value("rope_type", "default") != "default")
      m.unsupported(fmt::format("rope_parameters.rope_type is '{}'", rp.value("rope_type", "")));
    if (rp.contains("rope_theta"))
      m.take("model.rope_theta", "rope_parameters.rope_theta", config::hfValue(rp["rope_theta"]));
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    m.unsupported("rope_scaling is set");
  // LlamaConfig's default, and Qwen3Config's and MistralConfig's.
  m.take("model.tie_weights", "tie_word_embeddings",
         YAML::Node(j.value("tie_word_embeddings", false)));
  if (j.value("hidden_act", "silu") != "silu")
    m.unsupported(fmt::format("hidden_act is '{}'", j.value("hidden_act", "")));
  if (j.value("attention_bias", false)) m.unsupported("attention_bias is true");
  if (j.value("mlp_bias", false)) m.unsupported("mlp_bias is true");
  const auto& c = m.lc().cfg.model;
  // A head as wide as hidden_size / num_attention_heads stays model.head_dim 0 (that default).
  if (j.contains("head_dim") && j["head_dim"].is_number_integer() &&
      j["head_dim"].get<int64_t>() != c.n_embd / c.n_head)
    m.take("model.head_dim", "head_dim", config::hfValue(j["head_dim"]));
  // max_position_embeddings is what the model may see, not a length to train at: a bound.
  const int64_t max_pos = j.value("max_position_embeddings", int64_t{0});
  if (max_pos > 0 && c.block_size > max_pos)
    throw UsageError(
        fmt::format("{}model.block_size {} exceeds the model's "
                    "max_position_embeddings {} in '{}'",
                    m.lc().where("model.block_size"), c.block_size, max_pos, m.file()));
}

io::Json exportConfig(const config::ModelConfig& cfg, int64_t vocab, int64_t max_positions,
                      const std::string& architecture, const std::string& model_type) {
  return {{"architectures", {architecture}},
          {"model_type", model_type},
          {"hidden_size", cfg.n_embd},
          {"intermediate_size", cfg.intermediate_size},
          {"num_hidden_layers", cfg.n_layer},
          {"num_attention_heads", cfg.n_head},
          {"num_key_value_heads", cfg.n_kv_head > 0 ? cfg.n_kv_head : cfg.n_head},
          {"head_dim", headDim(cfg)},
          {"hidden_act", "silu"},
          {"max_position_embeddings", std::max(max_positions, cfg.block_size)},
          {"rms_norm_eps", cfg.norm_eps},
          {"rope_theta", cfg.rope_theta},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", cfg.rope_theta}}},
          {"attention_bias", false},
          {"attention_dropout", cfg.dropout},
          {"mlp_bias", false},
          {"tie_word_embeddings", cfg.tie_weights},
          {"vocab_size", vocab},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr},
          {"dtype", "float32"}};
}

double flops(const config::ModelConfig& m, int64_t params, int64_t vocab, int64_t attended) {
  // The token embedding is only looked up unless the head multiplies by it.
  return transformerFlops(m, params, m.tie_weights ? 0 : vocab * m.n_embd, headDim(m), attended);
}

std::vector<TpRule> tensorParallelPlan(const config::ModelConfig&) {
  const std::string block = "model.layers.*.";
  return {{"model.embed_tokens", TpStyle::kVocabEmbedding},
          {block + "self_attn.q_proj", TpStyle::kColwise},
          {block + "self_attn.k_proj", TpStyle::kColwise},
          {block + "self_attn.v_proj", TpStyle::kColwise},
          {block + "self_attn.o_proj", TpStyle::kRowwise},
          {block + "mlp.gate_proj", TpStyle::kColwise},
          {block + "mlp.up_proj", TpStyle::kColwise},
          {block + "mlp.down_proj", TpStyle::kRowwise},
          {"lm_head", TpStyle::kVocabHead}};
}

ModelSpec spec() {
  ModelSpec s;
  s.traits = {"llama", true, false, false, true, true};
  s.help = "llama (Llama's: RMSNorm, rotary positions, SwiGLU, grouped-query attention)";
  s.options = options;
  s.takes = transformerKeys();
  s.validate = validate;
  s.validate_tensor_parallel = validateTensorParallel;
  s.hf = {{"llama"}, importConfig, llamaConfig, nullptr, ""};
  s.tensor_parallel_plan = tensorParallelPlan;
  s.flops_per_token = llamaFlops;
  return s;
}

}  // namespace ltrain::models::llama
