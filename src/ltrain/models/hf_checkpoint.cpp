#include "ltrain/models/hf_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "ltrain/common/errors.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/owned_dir.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/spec.h"

namespace fs = std::filesystem;

namespace ltrain::models {

// The family's name for an ltrain parameter name (models/<family>/spec.cpp).
HfName hfName(const config::ModelConfig& cfg, const std::string& name) {
  const auto* spec = findModelSpec(cfg.name);
  return spec && spec->hf.name ? spec->hf.name(name, cfg) : HfName{name};
}

namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors of a checkpoint that carry no weights ltrain has: GPT-2's causal-mask buffers, old
// Llama checkpoints' rotary frequencies, a tied head saved twice.
bool ignorable(const std::string& name, bool tied) {
  return endsWith(name, ".attn.bias") || endsWith(name, ".attn.masked_bias") ||
         endsWith(name, "rotary_emb.inv_freq") || (tied && name == "lm_head.weight");
}

// The files of a Hugging Face directory: model.safetensors, or the shards its index lists.
std::vector<std::string> hfFiles(const std::string& dir) {
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
    // PyTorch pickles (pytorch_model.bin) run code when read: converted once, by the user.
    const bool pickled = fs::is_regular_file(d / "pytorch_model.bin", ec) ||
                         fs::is_regular_file(d / "pytorch_model.bin.index.json", ec);
    throw UsageError(fmt::format(
        "model.init_from '{}' has no model.safetensors (or model.safetensors.index.json){}", dir,
        pickled ? fmt::format(
                      "; it holds pytorch_model.bin, which ltrain does not unpickle: convert it "
                      "once with ~/.cache/ltrain/venv/bin/python -c \"import transformers as t; "
                      "t.AutoModelForCausalLM.from_pretrained('{}').save_pretrained('{}')\"",
                      dir, dir)
                : ""));
  }
  return files;
}

// Where each of the model's parameters is in model.init_from's files: its headers are read and
// checked (every parameter there with its shape, nothing else), no tensor's data yet.
class InitialWeights {
 public:
  struct Place {
    size_t file = 0;
    std::string name;  // in the file
    bool transposed = false;
  };

  InitialWeights(const Classifier& model, const config::ModelConfig& cfg) : from_(cfg.init_from) {
    const bool hf = config::isHfModelDir(from_);
    for (const auto& f : hf ? hfFiles(from_) : std::vector<std::string>{from_})
      files_.push_back(std::make_shared<io::SafetensorsFile>(f));
    std::map<std::string, std::pair<size_t, std::string>> stored;  // GPT-2's: "transformer." added
    const auto* spec = findModelSpec(cfg.name);
    const std::string prefix = spec ? spec->hf.base_prefix : "";
    for (size_t i = 0; i < files_.size(); ++i)
      for (const auto& [name, e] : files_[i]->entries()) {
        // A base model saved alone (GPT2Model) lacks its prefix ("transformer.").
        const bool bare =
            hf && !prefix.empty() && name.rfind(prefix, 0) != 0 && name.rfind("lm_head.", 0) != 0;
        stored[bare ? prefix + name : name] = {i, name};
      }
    std::set<std::string> used;
    auto place = [&](const std::string& key, const torch::Tensor& t) {
      const HfName n = hf ? hfName(cfg, key) : HfName{key};
      auto it = stored.find(n.name);
      if (it == stored.end())
        throw UsageError(hf ? fmt::format("model.init_from '{}' has no tensor '{}' (ltrain's {})",
                                          from_, n.name, key)
                            : fmt::format("safetensors file '{}' has no tensor '{}' that the model "
                                          "needs",
                                          from_, key));
      const auto& shape = files_[it->second.first]->find(it->second.second)->shape;
      auto want = t.sizes().vec();  // not t.t(): a deferred parameter has no memory to view
      if (n.transposed) std::reverse(want.begin(), want.end());
      const bool prefix = n.leading_rows && shape.size() == want.size() && !want.empty() &&
                          shape[0] >= want[0] &&
                          std::equal(shape.begin() + 1, shape.end(), want.begin() + 1);
      if (shape != want && !prefix)
        throw UsageError(
            hf ? fmt::format("model.init_from '{}': tensor '{}' has shape [{}], the model expects "
                             "[{}]",
                             from_, n.name, fmt::join(shape, ", "), fmt::join(want, ", "))
               : fmt::format(
                     "safetensors file '{}': tensor '{}' has shape {}, the model expects {}", from_,
                     key, fmt::join(shape, "x"), fmt::join(want, "x")));
      used.insert(n.name);
      return Place{it->second.first, it->second.second, n.transposed};
    };
    for (const auto& p : model->named_parameters())
      params_[p.value().unsafeGetTensorImpl()] = place(p.key(), p.value());
    if (!hf)  // a file of the model's own names holds its buffers too
      for (const auto& b : model->named_buffers())
        buffers_.emplace_back(b.value(), place(b.key(), b.value()));
    for (const auto& [name, where] : stored)
      if (!used.count(name) && !(hf && ignorable(name, cfg.tie_weights)))
        throw UsageError(
            hf ? fmt::format("model.init_from '{}' has tensor '{}' that ltrain's {} does not (a "
                             "different architecture?)",
                             from_, name, cfg.name)
               : fmt::format("safetensors file '{}' has tensor '{}' that the model does not have",
                             from_, where.second));
  }

  // Elements [begin, end) of `p` (flattened) from the file; a transposed one is read whole.
  // Whether the file holds the parameter (not so for one added after the build: an adapter).
  bool has(const torch::Tensor& p) const { return params_.count(p.unsafeGetTensorImpl()) > 0; }
  void read(const torch::Tensor& p, int64_t begin, int64_t end) const {
    const Place& at = params_.at(p.unsafeGetTensorImpl());
    const auto& file = *files_[at.file];
    if (at.transposed) {
      p.copy_(file.read(at.name).t());
    } else if (end > begin) {
      p.view(-1).narrow(0, begin, end - begin).copy_(file.read(at.name, begin, end - begin));
    }
  }
  void readBuffers() const {
    for (const auto& [b, at] : buffers_) b.copy_(files_[at.file]->read(at.name));
  }

 private:
  std::string from_;
  std::vector<std::shared_ptr<io::SafetensorsFile>> files_;
  std::map<const c10::TensorImpl*, Place> params_;
  std::vector<std::pair<torch::Tensor, Place>> buffers_;
};

// A deferred model's values from model.init_from: of each parameter, only the elements the rank
// keeps are read.
class FileValues final : public DeferredValues {
 public:
  explicit FileValues(std::shared_ptr<const InitialWeights> weights)
      : weights_(std::move(weights)) {}
  void fill(size_t, torch::nn::Module& target, const WantedElements& wanted) override {
    torch::NoGradGuard no_grad;
    for (const auto& p : target.parameters()) {
      if (!weights_->has(p)) continue;  // LoRA's adapters: made after the build, kept as made
      const auto [begin, end] = wanted(p);
      weights_->read(p, begin, end);
    }
  }

 private:
  std::shared_ptr<const InitialWeights> weights_;
};

}  // namespace

void loadInitialWeights(Classifier& model, const config::ModelConfig& cfg) {
  if (cfg.init_from.empty()) return;
  auto weights = std::make_shared<const InitialWeights>(model, cfg);
  torch::NoGradGuard no_grad;
  weights->readBuffers();
  if (model->deferred) {  // read when the plan shards each layer
    model->deferred = std::make_shared<FileValues>(weights);
    return;
  }
  for (const auto& p : model->parameters()) weights->read(p, 0, p.numel());
}

void exportHf(const Classifier& model, const config::ModelConfig& cfg, int64_t vocab,
              const std::string& dir, int64_t max_positions, const ParameterValues& values) {
  io::checkOwnable(dir, io::DirKind::kExport);
  io::claimDir(dir, io::DirKind::kExport);
  const auto named = model->named_parameters();
  std::vector<io::SafetensorsStream::Entry> entries;
  for (const auto& p : named) {
    const HfName hf = hfName(cfg, p.key());
    auto shape = p.value().sizes().vec();
    if (hf.transposed) std::reverse(shape.begin(), shape.end());
    entries.push_back({hf.name, torch::kFloat, shape});
  }
  // Each tensor read, converted and written before the next is read.
  auto write = [&](io::SafetensorsStream& out) {
    for (const auto& p : named) {
      torch::Tensor t = values ? values(p.key()) : p.value().detach();
      if (!t.sizes().equals(p.value().sizes()))
        throw UsageError(fmt::format("the weights' '{}' has shape [{}], the model's is [{}]",
                                     p.key(), fmt::join(t.sizes(), ", "),
                                     fmt::join(p.value().sizes(), ", ")));
      t = t.to(torch::kCPU, torch::kFloat);
      out.write(hfName(cfg, p.key()).transposed ? t.t().contiguous() : t.contiguous());
    }
  };
  const auto* spec = findModelSpec(cfg.name);
  if (!spec || !spec->hf.export_config)
    throw UsageError(fmt::format(
        "ltrain export --hf: model.name {} has no Hugging Face architecture ({} do)", cfg.name,
        listed(familiesWhere([](const ModelSpec& s) { return s.hf.export_config != nullptr; }),
               "and")));
  const io::Json c = spec->hf.export_config(cfg, vocab, max_positions);
  const fs::path d(dir);
  try {
    io::SafetensorsStream out((d / "model.safetensors").string(), entries, {{"format", "pt"}});
    write(out);
    out.commit();
    io::writeFileAtomic((d / "config.json").string(), c.dump(2) + "\n");
    io::writeFileAtomic(
        (d / "generation_config.json").string(),
        io::Json{{"bos_token_id", nullptr}, {"eos_token_id", nullptr}}.dump(2) + "\n");
  } catch (const UsageError&) {
    throw;  // the weights read, not the directory
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("export directory '{}' is not writable: {}", dir, e.what()));
  }
}

}  // namespace ltrain::models
