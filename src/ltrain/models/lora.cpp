#include "ltrain/models/lora.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/common/tensor_storage.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/owned_dir.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/module_paths.h"
#include "ltrain/models/parallel_modules.h"

namespace ltrain::models {
namespace {

namespace fs = std::filesystem;

std::string lastElement(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::vector<std::string> targets(const std::string& list) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= list.size()) {
    const size_t comma = std::min(list.find(',', from), list.size());
    auto t = list.substr(from, comma - from);
    t.erase(0, t.find_first_not_of(" \t"));
    t.erase(t.find_last_not_of(" \t") + 1);
    if (!t.empty()) out.push_back(t);
    from = comma + 1;
  }
  return out;
}

// PEFT's match for a list of target names: the module's whole name, or its last elements.
bool targeted(const std::string& target, const std::string& path) {
  return path == target ||
         (path.size() > target.size() &&
          path.compare(path.size() - target.size() - 1, std::string::npos, "." + target) == 0);
}

// Every adapted linear under its path.
std::vector<std::pair<std::string, LinearImpl*>> adapted(const Classifier& model) {
  std::vector<std::pair<std::string, LinearImpl*>> out;
  forEachModule(model, [&](const std::string& path, torch::nn::Module& m) {
    if (auto* l = dynamic_cast<LinearImpl*>(&m); l && l->lora_A) out.emplace_back(path, l);
  });
  return out;
}

// The adapter tensors' names as PEFT saves them: "base_model.model." and transformers' module.
std::string peftPrefix(const config::ModelConfig& m, const std::string& path) {
  const std::string w = hfName(m, path + ".weight").name;
  return "base_model.model." + w.substr(0, w.size() - std::string(".weight").size());
}

// lora.base_dtype: every linear's frozen weight held in `dtype` (its bias, the norms and the
// embeddings stay: a few percent of the model, and what the residual stream is made of). A weight
// shared with another module (a tied head's) stays too. A deferred model's weights have no memory
// yet: they are made in `dtype` when the plan fills them.
void holdBaseIn(Classifier& model, torch::ScalarType dtype) {
  std::set<const c10::TensorImpl*> shared;
  forEachModule(model, [&](const std::string&, torch::nn::Module& m) {
    if (dynamic_cast<LinearImpl*>(&m)) return;
    for (const auto& p : m.parameters(/*recurse=*/false)) shared.insert(p.unsafeGetTensorImpl());
  });
  torch::NoGradGuard no_grad;
  forEachModule(model, [&](const std::string&, torch::nn::Module& m) {
    auto* l = dynamic_cast<LinearImpl*>(&m);
    if (!l || l->weight.requires_grad() || shared.count(l->weight.unsafeGetTensorImpl())) return;
    l->weight.set_data(hasStorage(l->weight)
                           ? l->weight.to(dtype)
                           : storageless(l->weight.sizes(), l->weight.options().dtype(dtype)));
  });
}

}  // namespace

LoraSummary applyLora(Classifier& model, const config::LoraConfig& cfg) {
  const auto wanted = targets(cfg.target_modules);
  const bool all = wanted.size() == 1 && wanted[0] == "all-linear";
  std::vector<std::pair<std::string, LinearImpl*>> linears;
  forEachModule(model, [&](const std::string& path, torch::nn::Module& m) {
    if (auto* l = dynamic_cast<LinearImpl*>(&m)) linears.emplace_back(path, l);
  });
  std::set<std::string> names, every;
  for (const auto& [path, l] : linears) every.insert(lastElement(path));
  for (const auto& t : wanted) {
    if (all) break;
    bool found = false;
    for (const auto& [path, l] : linears) found = found || targeted(t, path);
    if (!found)
      throw UsageError(fmt::format(
          "lora.target_modules: '{}' names no linear of the model; its linears are {} (or "
          "all-linear)",
          t, fmt::join(every, ", ")));
  }
  for (auto& p : model->parameters()) p.requires_grad_(false);
  LoraSummary s;
  for (auto& [path, l] : linears) {
    bool on = all;
    for (const auto& t : wanted) on = on || targeted(t, path);
    if (!on) continue;
    l->addLora(cfg.rank, cfg.alpha, cfg.dropout, cfg.use_dora);
    names.insert(lastElement(path));
    ++s.modules;
  }
  if (cfg.base_dtype == "bf16") holdBaseIn(model, torch::kBFloat16);
  s.names.assign(names.begin(), names.end());
  for (const auto& p : model->parameters()) {
    s.total += p.numel();
    if (p.requires_grad()) s.trainable += p.numel();
  }
  return s;
}

std::optional<LoraSummary> applyFinetuning(Classifier& model, const config::ExperimentConfig& cfg,
                                           bool starting) {
  if (!config::trainsLora(cfg)) return std::nullopt;
  auto s = applyLora(model, cfg.lora);
  if (starting && !cfg.finetune.adapter_from.empty())
    loadAdapter(model, cfg.model, cfg.finetune.adapter_from);
  return s;
}

bool hasLora(const Classifier& model) {
  return !adapted(model).empty();
}

void loadAdapter(Classifier& model, const config::ModelConfig& m, const std::string& dir) {
  const std::string file = (fs::path(dir) / "adapter_model.safetensors").string();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw UsageError(
        fmt::format("finetune.adapter_from '{}' has no adapter_model.safetensors{}", dir,
                    fs::exists(fs::path(dir) / "adapter_model.bin", ec)
                        ? " (only adapter_model.bin: save it again with safe_serialization=True)"
                        : ""));
  auto stored = io::loadSafetensors(file);
  torch::NoGradGuard no_grad;
  for (auto& [path, l] : adapted(model)) {
    const std::string prefix = peftPrefix(m, path);
    std::vector<std::pair<std::string, torch::Tensor>> parts{{"lora_A.weight", l->lora_A->weight},
                                                             {"lora_B.weight", l->lora_B->weight}};
    if (l->lora_magnitude.defined()) parts.emplace_back("lora_magnitude_vector", l->lora_magnitude);
    for (auto& [part, w] : parts) {
      const std::string name = prefix + "." + part;
      auto it = stored.find(name);
      if (it == stored.end())
        throw UsageError(fmt::format(
            "'{}' has no tensor '{}': the adapter was made for other modules or another base "
            "model",
            file, name));
      if (!it->second.sizes().equals(w.sizes()))
        throw UsageError(fmt::format(
            "'{}': tensor '{}' has shape [{}], the model's is [{}]: an adapter made for another "
            "base model",
            file, name, fmt::join(it->second.sizes(), ", "), fmt::join(w.sizes(), ", ")));
      w.copy_(it->second);
      stored.erase(it);
    }
  }
  if (!stored.empty())
    throw UsageError(fmt::format("'{}' has tensor '{}', which no adapted module of the model takes",
                                 file, stored.begin()->first));
}

void exportPeft(const Classifier& model, const config::ExperimentConfig& cfg,
                const std::string& dir) {
  const auto modules = adapted(model);
  if (modules.empty())
    throw UsageError(fmt::format(
        "ltrain export --peft: the model has no LoRA adapters (finetune.method is {}); export "
        "the whole model with --hf",
        cfg.finetune.method));
  io::checkOwnable(dir, io::DirKind::kExport);
  io::claimDir(dir, io::DirKind::kExport);
  io::NamedTensors tensors;
  std::set<std::string> names;
  for (const auto& [path, l] : modules) {
    const std::string prefix = peftPrefix(cfg.model, path);
    tensors.emplace_back(prefix + ".lora_A.weight", l->lora_A->weight.detach().cpu().contiguous());
    tensors.emplace_back(prefix + ".lora_B.weight", l->lora_B->weight.detach().cpu().contiguous());
    if (l->lora_magnitude.defined())
      tensors.emplace_back(prefix + ".lora_magnitude_vector",
                           l->lora_magnitude.detach().cpu().contiguous());
    names.insert(lastElement(path));
  }
  const double alpha = cfg.lora.alpha;
  io::Json c = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path",
       cfg.model.init_from.empty() ? io::Json(nullptr) : io::Json(cfg.model.init_from)},
      {"r", cfg.lora.rank},
      {"lora_alpha",
       alpha == std::floor(alpha) ? io::Json(static_cast<int64_t>(alpha)) : io::Json(alpha)},
      {"lora_dropout", cfg.lora.dropout},
      {"target_modules", std::vector<std::string>(names.begin(), names.end())},
      {"bias", "none"},
      // GPT-2's Conv1D stores its weight [in, out]; the adapters are plain linears either way.
      {"fan_in_fan_out", hfName(cfg.model, modules.front().first + ".weight").transposed},
      {"use_dora", cfg.lora.use_dora},
      {"use_rslora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", io::Json::object()},
      {"alpha_pattern", io::Json::object()},
      {"revision", nullptr},
  };
  try {
    io::saveSafetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors,
                        {{"format", "pt"}});
    io::writeFileAtomic((fs::path(dir) / "adapter_config.json").string(), c.dump(2) + "\n");
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("export directory '{}' is not writable: {}", dir, e.what()));
  }
}

void mergeLora(Classifier& model) {
  // A base held in bf16 (lora.base_dtype) back in fp32 first: the adapters merge in their
  // precision, and the plain model is in one dtype for export --hf.
  holdBaseIn(model, torch::kFloat);
  for (auto& [path, l] : adapted(model)) l->mergeLora();
}

}  // namespace ltrain::models
