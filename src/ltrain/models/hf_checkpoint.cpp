#include "ltrain/models/hf_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/owned_dir.h"
#include "ltrain/io/safetensors.h"

namespace fs = std::filesystem;

namespace ltrain::models {
namespace {

struct HfName {
  std::string name;
  bool transposed = false;  // GPT-2's Conv1D: stored [in, out]
};

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ltrain's gpt names ("layers.<i>.<rest>") as GPT2LMHeadModel's.
HfName gpt2Name(const std::string& name, int64_t n_layer) {
  const auto dot = name.find('.', 7);
  const int64_t i = std::stoll(name.substr(7, dot - 7));  // after "layers."
  const std::string rest = name.substr(dot + 1);
  if (i == 0) return {"transformer." + rest};  // wte.weight, wpe.weight
  if (i == n_layer + 1) return {"transformer.ln_f." + rest};
  if (i == n_layer + 2) return {"lm_head." + rest};
  const bool conv1d = rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" ||
                      rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight";
  return {fmt::format("transformer.h.{}.{}", i - 1, rest), conv1d};
}

HfName hfName(const config::ModelConfig& cfg, const std::string& name) {
  if (cfg.name == "gpt") return gpt2Name(name, cfg.n_layer);
  return {name};  // llama's are transformers' own
}

// Tensors of a checkpoint that carry no weights ltrain has: GPT-2's causal-mask buffers, old
// Llama checkpoints' rotary frequencies, a tied head saved twice.
bool ignorable(const std::string& name, bool tied) {
  return endsWith(name, ".attn.bias") || endsWith(name, ".attn.masked_bias") ||
         endsWith(name, "rotary_emb.inv_freq") || (tied && name == "lm_head.weight");
}

// name -> tensor over all shards, GPT-2's names without a "transformer." prefix given one.
std::map<std::string, torch::Tensor> readHfTensors(const std::string& dir,
                                                   const std::string& type) {
  const fs::path d(dir);
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(d / "model.safetensors", ec)) {
    files.push_back((d / "model.safetensors").string());
  } else if (fs::is_regular_file(d / "model.safetensors.index.json", ec)) {
    const std::string index = (d / "model.safetensors.index.json").string();
    const io::Json j = io::readJsonFile(index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw UsageError(fmt::format("'{}' has no weight_map object", index));
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items())
      if (file.is_string()) shards.insert(file.get<std::string>());
    for (const auto& s : shards) files.push_back((d / s).string());
  } else {
    throw UsageError(fmt::format(
        "model.init_from '{}' has no model.safetensors (or model.safetensors.index.json)", dir));
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& f : files)
    for (auto& [name, t] : io::loadSafetensors(f)) {
      const bool bare_gpt2 =
          type == "gpt" && name.rfind("transformer.", 0) != 0 && name.rfind("lm_head.", 0) != 0;
      out[bare_gpt2 ? "transformer." + name : name] = std::move(t);
    }
  return out;
}

}  // namespace

void loadInitialWeights(Classifier& model, const config::ModelConfig& cfg) {
  const std::string& from = cfg.init_from;
  if (from.empty()) return;
  if (!config::isHfModelDir(from)) return io::loadModuleState(*model, from);
  auto file = readHfTensors(from, cfg.name);
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : model->named_parameters()) {
    const HfName hf = hfName(cfg, p.key());
    auto it = file.find(hf.name);
    if (it == file.end())
      throw UsageError(fmt::format("model.init_from '{}' has no tensor '{}' (ltrain's {})", from,
                                   hf.name, p.key()));
    torch::Tensor t = hf.transposed ? it->second.t() : it->second;
    if (t.sizes() != p.value().sizes())
      throw UsageError(
          fmt::format("model.init_from '{}': tensor '{}' has shape [{}], the model expects [{}]",
                      from, hf.name, fmt::join(it->second.sizes(), ", "),
                      fmt::join(hf.transposed ? p.value().t().sizes() : p.value().sizes(), ", ")));
    p.value().copy_(t);
    used.insert(hf.name);
  }
  for (const auto& [name, t] : file)
    if (!used.count(name) && !ignorable(name, cfg.tie_weights))
      throw UsageError(
          fmt::format("model.init_from '{}' has tensor '{}' that ltrain's {} does not (a different "
                      "architecture?)",
                      from, name, cfg.name));
}

void exportHf(const Classifier& model, const config::ModelConfig& cfg, int64_t vocab,
              const std::string& dir, int64_t max_positions) {
  io::checkOwnable(dir, io::DirKind::kExport);
  io::claimDir(dir, io::DirKind::kExport);
  io::NamedTensors tensors;
  for (const auto& p : model->named_parameters()) {
    const HfName hf = hfName(cfg, p.key());
    auto t = p.value().detach().to(torch::kCPU, torch::kFloat);
    tensors.emplace_back(hf.name, hf.transposed ? t.t().contiguous() : t);
  }
  io::Json c;
  if (cfg.name == "llama") {
    c = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"hidden_size", cfg.n_embd},
         {"intermediate_size", cfg.intermediate_size},
         {"num_hidden_layers", cfg.n_layer},
         {"num_attention_heads", cfg.n_head},
         {"num_key_value_heads", cfg.n_kv_head > 0 ? cfg.n_kv_head : cfg.n_head},
         {"head_dim", cfg.n_embd / cfg.n_head},
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
  } else if (cfg.name == "gpt") {
    c = {{"architectures", {"GPT2LMHeadModel"}},
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
  } else {
    throw UsageError(fmt::format(
        "ltrain export --hf: model.name {} has no Hugging Face architecture (gpt and llama do)",
        cfg.name));
  }
  const fs::path d(dir);
  try {
    io::saveSafetensors((d / "model.safetensors").string(), tensors, {{"format", "pt"}});
    io::writeFileAtomic((d / "config.json").string(), c.dump(2) + "\n");
    io::writeFileAtomic(
        (d / "generation_config.json").string(),
        io::Json{{"bos_token_id", nullptr}, {"eos_token_id", nullptr}}.dump(2) + "\n");
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("export directory '{}' is not writable: {}", dir, e.what()));
  }
}

}  // namespace ltrain::models
