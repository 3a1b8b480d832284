#include "ltrain/inference/inference.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/checkpoint/sharded_checkpoint.h"
#include "ltrain/common/errors.h"
#include "ltrain/common/memory_phase.h"
#include "ltrain/compute/devices.h"
#include "ltrain/compute/precision.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/config/model_families.h"
#include "ltrain/io/files.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/lora.h"
#include "ltrain/models/spec.h"

namespace fs = std::filesystem;

namespace ltrain::inference {
using checkpoint::loadCheckpointModel;
using checkpoint::newestCheckpoint;
using compute::AutocastScope;
using compute::bindDevice;
using compute::chooseDevices;
using compute::Devices;
namespace {

bool isSafetensors(const std::string& p) {
  return fs::path(p).extension() == ".safetensors";
}

// The run directory of a weights file: RUN/checkpoints/step-*.pt or RUN/model.safetensors.
std::string runDirOf(const std::string& weights) {
  fs::path dir = fs::path(weights).parent_path();
  if (dir.filename() == "checkpoints") dir = dir.parent_path();
  return dir.string();
}

// The first that exists: --tokenizer; the run's vocabulary.json or tokenizer.json;
// model.init_from's or data.path's tokenizer.json, then their tokenizer.model (SentencePiece's,
// where a model folder has no tokenizer.json).
std::string findTokenizer(const InferenceRequest& req, const config::ExperimentConfig& cfg,
                          const std::string& run_dir) {
  std::error_code ec;
  if (!req.tokenizer.empty()) {
    if (!fs::is_regular_file(req.tokenizer, ec))
      throw UsageError(fmt::format("--tokenizer '{}' not found", req.tokenizer));
    return req.tokenizer;
  }
  std::vector<fs::path> candidates;
  if (!run_dir.empty())
    candidates = {fs::path(run_dir) / "vocabulary.json", fs::path(run_dir) / "tokenizer.json"};
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (config::isHfModelDir(cfg.model.init_from))
      candidates.push_back(fs::path(cfg.model.init_from) / name);
    if (cfg.data.dataset == "tokens" || cfg.data.dataset == "chat")
      candidates.push_back(fs::path(cfg.data.path) / name);
  }
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c.string();
  return "";
}

// The vocabulary a .safetensors of ltrain's holds: its token embedding's rows.
int64_t vocabFromWeights(const std::string& weights) {
  if (weights.empty() || !isSafetensors(weights)) return 0;
  const io::SafetensorsFile file(weights);  // its header alone
  for (const char* name : {"layers.0.wte.weight", "model.embed_tokens.weight"})
    if (const auto* e = file.find(name); e && !e->shape.empty()) return e->shape[0];
  return 0;
}

// A model built without parameter memory reads its weights one parameter at a time, after every
// name and shape was checked against the file's header or the checkpoint's index.
models::ParameterValues streamedValues(const std::string& weights, const models::Classifier& m) {
  if (checkpoint::isShardedCheckpoint(weights)) {
    auto ckpt = std::make_shared<const checkpoint::ShardedCheckpointReader>(weights);
    ckpt->check(*m, nullptr, {});
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& p : m->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
    return [ckpt, shapes](const std::string& name) {
      const auto& shape = shapes.at(name);
      return ckpt->read(name, "param", 0, c10::multiply_integers(shape)).view(shape);
    };
  }
  auto file = std::make_shared<const io::SafetensorsFile>(weights);
  for (const auto& p : m->named_parameters()) {
    const auto* e = file->find(p.key());
    if (!e)
      throw UsageError(fmt::format("safetensors file '{}' has no tensor '{}' that the model needs",
                                   weights, p.key()));
    if (!p.value().sizes().equals(e->shape))
      throw UsageError(fmt::format(
          "safetensors file '{}': tensor '{}' has shape {}, the model expects {}", weights, p.key(),
          fmt::join(e->shape, "x"), fmt::join(p.value().sizes(), "x")));
  }
  return [file](const std::string& name) { return file->read(name); };
}

}  // namespace

RunFiles resolveRun(const InferenceRequest& req) {
  std::error_code ec;
  if (req.config.empty() && req.run.empty())
    throw UsageError("expected a CONFIG.yaml argument or --run RUN_DIR");
  if (!req.run.empty() && !fs::is_directory(req.run, ec))
    throw UsageError(fmt::format("--run '{}' is not a directory", req.run));
  RunFiles f{req.config.empty() ? req.run + "/config.yaml" : req.config, req.checkpoint};
  if (f.weights.empty() && !req.run.empty()) {
    const auto final_weights = fs::path(req.run) / "model.safetensors";
    if (fs::is_regular_file(final_weights, ec))
      f.weights = final_weights.string();
    else if (auto newest = newestCheckpoint((fs::path(req.run) / "checkpoints").string()))
      f.weights = *newest;
    else
      throw UsageError(fmt::format(
          "--run '{}' holds no weights (model.safetensors or checkpoints/step-*.pt)", req.run));
  }
  return f;
}

LoadedModel loadTrainedModel(const InferenceRequest& req, bool need_codec, bool streamed) {
  const RunFiles files = resolveRun(req);
  std::error_code ec;
  LoadedModel lm;
  lm.lc = config::loadConfig(files.config, req.overrides);
  const auto& cfg = lm.lc.cfg;
  if (!config::modelFamily(cfg.model.name).language_model)
    throw UsageError(
        fmt::format("{}model.name is '{}': generation and export need a language "
                    "model ({})",
                    lm.lc.where("model.name"), cfg.model.name,
                    models::listed(models::familiesWhere(
                        [](const models::ModelSpec& s) { return s.traits.language_model; }))));
  lm.weights = files.weights;
  if (lm.weights.empty() && cfg.model.init_from.empty())
    throw UsageError(
        "expected --checkpoint PATH (a checkpoint .pt or a model.safetensors), "
        "--run RUN_DIR, or model.init_from");
  // A file, or dist.zero 3's step-N.shards directory.
  if (!lm.weights.empty() && !fs::is_regular_file(lm.weights, ec) &&
      !fs::exists(fs::path(lm.weights) / "index.json", ec))
    throw UsageError(fmt::format("--checkpoint '{}' not found", lm.weights));
  const std::string run_dir = !req.run.empty()     ? req.run
                              : lm.weights.empty() ? ""
                                                   : runDirOf(lm.weights);
  lm.tokenizer_file = findTokenizer(req, cfg, run_dir);
  if (!lm.tokenizer_file.empty()) lm.codec = data::loadCodec(lm.tokenizer_file);
  if (need_codec && !lm.codec)
    throw UsageError(fmt::format(
        "no tokenizer found for these weights (looked for vocabulary.json, tokenizer.json and "
        "tokenizer.model in "
        "'{}'{}): pass --tokenizer FILE",
        run_dir, cfg.data.dataset == "tokens" ? " and data.path" : ""));
  lm.vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size
             : lm.codec               ? lm.codec->vocabSize()
                                      : vocabFromWeights(lm.weights);
  if (lm.vocab <= 0)
    throw UsageError("the vocabulary size is unknown: set model.vocab_size (or pass --tokenizer)");
  if (lm.codec && lm.codec->vocabSize() > lm.vocab)
    throw UsageError(
        fmt::format("tokenizer '{}' has {} tokens, more than the model's {} "
                    "(model.vocab_size)",
                    lm.tokenizer_file, lm.codec->vocabSize(), lm.vocab));
  torch::manual_seed(static_cast<uint64_t>(cfg.seed));
  config::ModelConfig m = cfg.model;
  m.placement = config::Placement::kSingle;  // one device: decoding is sequential anyway
  // (a file, or dist.zero 3's step-N.shards directory: checked above; LoRA's adapters are added
  // to a whole model, and a tuned base is small enough to hold)
  streamed = streamed && !config::trainsLora(cfg) && !lm.weights.empty() &&
             (isSafetensors(lm.weights) || checkpoint::isShardedCheckpoint(lm.weights));
  lm.model = models::build(m, {cfg.model.block_size}, lm.vocab, /*tokens=*/true, streamed);
  // LoRA adapters go on before a run's weights, which hold them, and after init_from's base.
  if (!lm.weights.empty()) models::applyFinetuning(lm.model, cfg, /*starting=*/false);
  if (streamed) {
    lm.values = streamedValues(lm.weights, lm.model);
  } else if (lm.weights.empty()) {
    models::loadInitialWeights(lm.model, cfg.model);
    models::applyFinetuning(lm.model, cfg, /*starting=*/true);
  } else if (isSafetensors(lm.weights)) {
    io::loadModuleState(*lm.model, lm.weights);
  } else {
    loadCheckpointModel(lm.weights, *lm.model);
  }
  return lm;
}

void runGenerate(const InferenceRequest& req, const std::string& prompt,
                 const models::SamplingOptions& options) {
  auto lm = loadTrainedModel(req, /*need_codec=*/true);
  const auto& cfg = lm.lc.cfg;
  if (cfg.train.threads > 0) at::set_num_threads(static_cast<int>(cfg.train.threads));
  const Devices devices = chooseDevices(cfg, distributed::Runtime{});
  bindDevice(devices.main);
  lm.model->to(devices.main);
  const auto ids = lm.codec->encode(prompt);
  if (ids.empty()) throw UsageError("--prompt is empty: give the text to continue");
  for (auto id : ids)
    if (id >= lm.vocab)
      throw UsageError(
          fmt::format("--prompt: token {} is outside the model's vocabulary of {}", id, lm.vocab));
  const auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> out;
  {
    AutocastScope autocast(cfg.train.precision, devices.main.type());
    out = models::generate(lm.model, cfg.model.block_size, ids, options, devices.main);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{}{}\n", prompt, lm.codec->decode(out));
  std::fflush(stdout);
  fmt::print(stderr,
             "generated {} tokens in {:.2f} s: {:.1f} tokens/s ({} prompt tokens, {} on {})\n",
             out.size(), s, s > 0 ? static_cast<double>(out.size()) / s : 0.0, ids.size(),
             cfg.model.name, devices.main.str());
}

namespace {

// Whether the run's tokenizer.json is model.init_from's own (a run on data cut with the model's
// tokenizer): then the model's special tokens and chat template still hold for the export.
bool isSourceTokenizer(const std::string& tokenizer, const std::string& init_from) {
  std::error_code ec;
  const fs::path theirs = fs::path(init_from) / "tokenizer.json";
  return config::isHfModelDir(init_from) && fs::is_regular_file(theirs, ec) &&
         tokenizer == io::readFile(theirs.string());
}

// The source's tokenizer files (its special tokens, its chat template) and its bos, eos and pad
// token ids, into the export's config.json and generation_config.json.
void carrySourceTokenizer(const std::string& init_from, const std::string& hf_dir) {
  const fs::path from(init_from), to(hf_dir);
  std::error_code ec;
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
    if (fs::is_regular_file(from / f, ec))
      io::writeFileAtomic((to / f).string(), io::readFile((from / f).string()));
  for (const char* f : {"config.json", "generation_config.json"}) {
    io::Json source = io::Json::object();
    if (fs::is_regular_file(from / f, ec)) source = io::readJsonFile((from / f).string());
    if (!source.is_object()) continue;
    auto out = io::readJsonFile((to / f).string());
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (source.contains(key) && !source[key].is_null()) out[key] = source[key];
    io::writeFileAtomic((to / f).string(), out.dump(2) + "\n");
  }
}

}  // namespace

void runExport(const InferenceRequest& req, const std::string& hf_dir,
               const std::string& peft_dir) {
  if (hf_dir.empty() && peft_dir.empty())
    throw UsageError("export: expected --hf DIR or --peft DIR");
  // One tensor of the weights in memory at a time: a model too large for this host exports.
  MemoryPhase memory("export");
  auto lm = loadTrainedModel(req, /*need_codec=*/false, /*streamed=*/true);
  const auto& cfg = lm.lc.cfg;
  if (!peft_dir.empty()) {
    models::exportPeft(lm.model, cfg, peft_dir);
    fmt::print("exported the LoRA adapters of {} (rank {}, {}) from {} to {}\n", cfg.model.name,
               cfg.lora.rank, cfg.lora.target_modules,
               lm.weights.empty() ? cfg.finetune.adapter_from : lm.weights, peft_dir);
    if (hf_dir.empty()) return;
  }
  models::mergeLora(lm.model);  // export --hf of a LoRA run: the tuned weights, merged
  int64_t max_positions = 0;    // an imported Llama keeps its max_position_embeddings
  if (config::isHfModelDir(cfg.model.init_from)) {
    const auto j = io::readJsonFile(cfg.model.init_from + "/config.json");
    max_positions = j.value("max_position_embeddings", int64_t{0});
  }
  models::exportHf(lm.model, cfg.model, lm.vocab, hf_dir, max_positions, lm.values);
  if (!lm.tokenizer_file.empty() && fs::path(lm.tokenizer_file).filename() == "tokenizer.json") {
    const std::string tokenizer = io::readFile(lm.tokenizer_file);
    io::writeFileAtomic(hf_dir + "/tokenizer.json", tokenizer);
    if (isSourceTokenizer(tokenizer, cfg.model.init_from))
      carrySourceTokenizer(cfg.model.init_from, hf_dir);
    else
      io::writeFileAtomic(hf_dir + "/tokenizer_config.json",
                          "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n");
  } else if (!lm.tokenizer_file.empty()) {
    io::writeFileAtomic(hf_dir + "/vocabulary.json", io::readFile(lm.tokenizer_file));
  }
  fmt::print("exported {} ({} parameters, vocabulary {}) from {} to {}\n", cfg.model.name,
             models::parameterCount(*lm.model), lm.vocab,
             lm.weights.empty() ? cfg.model.init_from : lm.weights, hf_dir);
}

}  // namespace ltrain::inference
