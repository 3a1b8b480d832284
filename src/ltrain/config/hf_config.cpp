#include "ltrain/config/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/json.h"

namespace ltrain::config {
namespace {

struct Field {
  const char* path;    // ltrain's key
  const char* hf_key;  // config.json's
};

// The value a config.json field gives, as YAML for the option's parser; null when absent.
YAML::Node asYaml(const io::Json& v) {
  if (v.is_boolean()) return YAML::Node(v.get<bool>());
  if (v.is_number_integer()) return YAML::Node(v.get<int64_t>());
  if (v.is_number()) return YAML::Node(fmt::format("{}", v.get<double>()));
  if (v.is_string()) return YAML::Node(v.get<std::string>());
  return YAML::Node();
}

bool same(const YAML::Node& a, const YAML::Node& b) {
  if (a.Scalar() == b.Scalar()) return true;
  double x, y;
  if (YAML::convert<double>::decode(a, x) && YAML::convert<double>::decode(b, y))
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  return false;
}

class Merger {
 public:
  Merger(LoadedConfig& lc, std::map<std::string, bool>& set, std::string file, io::Json j)
      : lc_(lc), set_(set), file_(std::move(file)), j_(std::move(j)) {}

  // Takes `value` (config.json's `hf_key`) into `path`, or checks it against the YAML's.
  void take(const std::string& path, const std::string& hf_key, const YAML::Node& value) {
    const Option* opt = findOption(path);
    if (set_.count(path)) {
      const YAML::Node mine = opt->read(lc_.cfg);
      if (!same(mine, value))
        throw UsageError(fmt::format("{}{} is {} but '{}' has {} {}", lc_.where(path), path,
                                     mine.Scalar(), file_, hf_key, value.Scalar()));
      return;
    }
    try {
      opt->assign(lc_.cfg, value);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("'{}': {} {} does not fit {}: {}", file_, hf_key, value.Scalar(),
                                   path, e.what()));
    }
    lc_.sources[path] = fmt::format("{} ({})", file_, hf_key);
    set_[path] = true;
  }
  void fields(const std::vector<Field>& list) {
    for (const auto& f : list)
      if (j_.contains(f.hf_key) && !j_[f.hf_key].is_null())
        take(f.path, f.hf_key, asYaml(j_[f.hf_key]));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw UsageError(fmt::format("'{}': {}, which ltrain's {} does not implement", file_, what,
                                 lc_.cfg.model.name));
  }
  const io::Json& json() const { return j_; }
  LoadedConfig& lc() { return lc_; }

 private:
  LoadedConfig& lc_;
  std::map<std::string, bool>& set_;
  std::string file_;
  io::Json j_;
};

void llama(Merger& m) {
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
      m.take("model.rope_theta", "rope_parameters.rope_theta", asYaml(rp["rope_theta"]));
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    m.unsupported("rope_scaling is set");
  m.take("model.tie_weights", "tie_word_embeddings",
         YAML::Node(j.value("tie_word_embeddings", false)));  // LlamaConfig's default
  if (j.value("hidden_act", "silu") != "silu")
    m.unsupported(fmt::format("hidden_act is '{}'", j.value("hidden_act", "")));
  if (j.value("attention_bias", false)) m.unsupported("attention_bias is true");
  if (j.value("mlp_bias", false)) m.unsupported("mlp_bias is true");
  const auto& c = m.lc().cfg.model;
  if (j.contains("head_dim") && j["head_dim"].is_number_integer() &&
      j["head_dim"].get<int64_t>() != c.n_embd / c.n_head)
    m.unsupported(fmt::format("head_dim is {}, not hidden_size / num_attention_heads ({})",
                              j["head_dim"].get<int64_t>(), c.n_embd / c.n_head));
  // max_position_embeddings is what the model may see, not a length to train at: a bound.
  const int64_t max_pos = j.value("max_position_embeddings", int64_t{0});
  if (max_pos > 0 && c.block_size > max_pos)
    throw UsageError(
        fmt::format("{}model.block_size {} exceeds the model's "
                    "max_position_embeddings {} in '{}'",
                    m.lc().where("model.block_size"), c.block_size, max_pos,
                    m.lc().cfg.model.init_from + "/config.json"));
}

void gpt2(Merger& m) {
  const auto& j = m.json();
  m.fields({{"model.n_embd", "n_embd"},
            {"model.n_layer", "n_layer"},
            {"model.n_head", "n_head"},
            {"model.block_size", "n_positions"},
            {"model.vocab_size", "vocab_size"}});
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

}  // namespace

bool isHfModelDir(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::is_directory(path, ec) &&
         std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json", ec);
}

void mergeHfConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set) {
  const std::string dir = lc.cfg.model.init_from;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return;
  if (!isHfModelDir(dir))
    throw UsageError(fmt::format(
        "{}model.init_from '{}' is a directory without config.json: expected a Hugging Face "
        "model directory (config.json and model.safetensors) or a .safetensors file",
        lc.where("model.init_from"), dir));
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  io::Json j = io::readJsonFile(file);
  if (!j.is_object()) throw UsageError(fmt::format("'{}' is not a JSON object", file));
  const std::string type = j.value("model_type", "");
  const std::string name = type == "llama" ? "llama" : type == "gpt2" ? "gpt" : "";
  if (name.empty())
    throw UsageError(
        fmt::format("'{}': model_type '{}'; ltrain imports llama and gpt2 models", file, type));
  if (explicitly_set.count("model.name") && lc.cfg.model.name != name)
    throw UsageError(fmt::format("{}model.name is '{}' but '{}' has model_type {} (model.name {})",
                                 lc.where("model.name"), lc.cfg.model.name, file, type, name));
  lc.cfg.model.name = name;
  if (!explicitly_set.count("model.name")) {
    lc.sources["model.name"] = fmt::format("{} (model_type)", file);
    explicitly_set["model.name"] = true;
  }
  Merger m(lc, explicitly_set, file, std::move(j));
  if (name == "llama")
    llama(m);
  else
    gpt2(m);
}

}  // namespace ltrain::config
