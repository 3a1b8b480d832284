// ltrain and Hugging Face transformers on the same weights. transformers builds small random
// LlamaForCausalLM and GPT2LMHeadModel models here (no downloads) and saves them; ltrain loads
// them through model.init_from (config.json giving the architecture) and its logits equal
// transformers' within 1e-5 in fp32. After a few steps of training from them, transformers loads
// ltrain's export (ltrain export --hf) and agrees with ltrain's logits, and greedy generation gives
// the same text on both sides.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/config/load.h"
#include "ltrain/inference/inference.h"
#include "ltrain/io/json.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runProcess;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
const std::string kTools = std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/hf_tools.py";

void python(const std::vector<std::string>& args) {
  std::vector<std::string> argv{LTRAIN_PYTHON, kTools};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = runProcess(argv);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

// transformers' logits for `ids`, from the model directory `dir`.
torch::Tensor theirLogits(const TempDir& tmp, const std::string& dir, const torch::Tensor& ids) {
  ltrain::io::saveSafetensors(tmp / "ids.safetensors", {{"ids", ids}});
  python({"logits", dir, tmp / "ids.safetensors", tmp / "logits.safetensors"});
  return ltrain::io::loadSafetensors(tmp / "logits.safetensors").at("logits");
}

double maxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a - b).abs().max().item<double>();
}

ltrain::config::LoadedConfig hfConfig(const std::string& dir, const std::string& extra = "") {
  return ltrain::config::loadConfigText(
      "data: {dataset: tokens}\nmodel:\n  init_from: " + dir + "\n" + extra, "test.yaml", {});
}

// A small random transformers model made by hf_tools.py `make` (vocabulary 96) into `hf`, and
// the config ltrain reads from it.
ltrain::config::LoadedConfig makeHf(const std::string& hf, const std::string& make,
                                    const std::vector<std::string>& flags) {
  std::vector<std::string> args{make, hf, "--vocab", "96"};
  args.insert(args.end(), flags.begin(), flags.end());
  python(args);
  return hfConfig(hf);
}

// The model `m` (read from the transformers directory `hf`) built by ltrain: transformers' logits
// within 1e-5, and a ZeRO-3 (deferred) build reading half of each parameter reads exactly what
// the whole load reads.
void checkLoadsAsTransformers(const TempDir& dir, const std::string& hf,
                              const ltrain::config::ModelConfig& m) {
  torch::manual_seed(1);
  auto model = ltrain::models::build(m, {std::min<int64_t>(m.block_size, 64)}, m.vocab_size, true);
  ltrain::models::loadInitialWeights(model, m);
  model->eval();
  auto ids = torch::randint(96, {2, 24}, torch::kLong);
  auto mine = model->forward(ids).detach();
  const double diff = maxDiff(mine, theirLogits(dir, hf, ids));
  INFO("max abs logit difference " << diff);
  CHECK(diff <= 1e-5);

  // dist.zero 3's way in: a model without parameter memory reads, layer by layer, only the
  // elements a rank keeps (here the second half of each parameter, GPT-2's transposed Conv1D
  // matrices included, from one file or from shards): exactly the whole load's.
  auto deferred = ltrain::models::build(m, {std::min<int64_t>(m.block_size, 64)}, m.vocab_size,
                                        true, /*deferred=*/true);
  ltrain::models::loadInitialWeights(deferred, m);
  REQUIRE(deferred->deferred);
  torch::NoGradGuard no_grad;
  auto half = [](const torch::Tensor& p) {
    return std::pair<int64_t, int64_t>{p.numel() / 2, p.numel()};
  };
  for (size_t i = 0; i < deferred->layers->size(); ++i) {
    auto& layer = *deferred->layers->ptr(i);
    for (auto& p : layer.parameters()) p.set_data(torch::zeros(p.sizes(), p.options()));
    deferred->deferred->fill(i, layer, half);
  }
  const auto whole = model->named_parameters(), part = deferred->named_parameters();
  REQUIRE(whole.size() == part.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    INFO(whole[i].key());
    const auto w = whole[i].value().reshape(-1), d = part[i].value().reshape(-1);
    const int64_t n = w.numel();
    CHECK(torch::equal(w.narrow(0, n / 2, n - n / 2), d.narrow(0, n / 2, n - n / 2)));
  }
}
}  // namespace

TEST_CASE("ltrain loads transformers' Llama and GPT-2 checkpoints and gives their logits",
          "[parity][hf]") {
  TempDir dir;
  struct Case {
    std::string name, make;
    std::vector<std::string> flags;
  };
  for (const auto& c : std::vector<Case>{{"llama-gqa-sharded", "make-llama", {"--shards"}},
                                         {"llama-tied", "make-llama", {"--tied", "--seed", "3"}},
                                         {"gpt2", "make-gpt2", {"--seed", "5"}}}) {
    INFO(c.name);
    const std::string hf = dir / c.name;
    auto lc = makeHf(hf, c.make, c.flags);
    const auto& m = lc.cfg.model;
    // The architecture came from config.json.
    CHECK(m.name == (c.make == "make-gpt2" ? "gpt" : "llama"));
    CHECK(m.vocab_size == 96);
    CHECK(m.n_embd == 32);
    CHECK(m.n_layer == 2);
    if (m.name == "llama") {
      CHECK(m.n_kv_head == 2);
      CHECK(m.rope_theta == 500000.0);
      CHECK(m.tie_weights == (c.name == "llama-tied"));
      CHECK(lc.sources.at("model.n_kv_head") == hf + "/config.json (num_key_value_heads)");
    } else {
      CHECK(m.block_size == 64);
      CHECK(m.gelu == ltrain::config::Gelu::kTanh);  // GPT-2's gelu_new
    }
    checkLoadsAsTransformers(dir, hf, m);
    if (m.name != "gpt") continue;
    // GPT-2 at a shorter context than its n_positions: the first rows of the position table give
    // transformers' logits on as many tokens; a longer one is refused naming both.
    const auto short_cfg = hfConfig(hf, "  block_size: 16\n").cfg.model;
    REQUIRE(short_cfg.block_size == 16);
    auto model = ltrain::models::build(short_cfg, {16}, 96, true);
    ltrain::models::loadInitialWeights(model, short_cfg);
    model->eval();
    const auto ids = torch::randint(96, {2, 16}, torch::kLong);
    CHECK(maxDiff(model->forward(ids).detach(), theirLogits(dir, hf, ids)) <= 1e-5);
    CHECK_THROWS_WITH(hfConfig(hf, "  block_size: 128\n"),
                      Contains("test.yaml:4: model.block_size 128 exceeds the model's n_positions "
                               "64 in '" +
                               hf + "/config.json'"));
  }
}

TEST_CASE("ltrain loads transformers' Qwen3 and Mistral checkpoints and gives their logits",
          "[parity][hf]") {
  TempDir dir;
  struct Case {
    std::string name, make;
    std::vector<std::string> flags;
  };
  for (const auto& c : std::vector<Case>{
           {"qwen3", "make-qwen3", {"--seed", "7"}},
           {"qwen3-tied", "make-qwen3", {"--tied", "--seed", "8"}},
           {"mistral-window-8", "make-mistral", {"--window", "8", "--seed", "9"}},
           {"mistral-tied-window-64", "make-mistral", {"--tied", "--window", "64"}}}) {
    INFO(c.name);
    const std::string hf = dir / c.name;
    auto lc = makeHf(hf, c.make, c.flags);
    const auto& m = lc.cfg.model;
    CHECK(m.name == (c.make == "make-qwen3" ? "qwen3" : "mistral"));
    CHECK(m.vocab_size == 96);
    CHECK(m.n_kv_head == 2);
    CHECK(m.tie_weights == (c.name.find("tied") != std::string::npos));
    if (m.name == "qwen3") {
      CHECK(m.head_dim == 16);  // wider than 32 / 4
      CHECK(m.norm_eps == 1e-6);
      CHECK(m.rope_theta == 1e6);
      CHECK(lc.sources.at("model.head_dim") == hf + "/config.json (head_dim)");
    } else {
      CHECK(m.head_dim == 0);
      CHECK(m.sliding_window == (c.name == "mistral-window-8" ? 8 : 64));
    }
    // 24 positions: a window of 8 masks most keys of the later queries, one of 64 none.
    checkLoadsAsTransformers(dir, hf, m);
    if (c.name == "mistral-window-8") {
      // The window matters: without it the same weights give other logits (so both sides
      // ignoring it could not agree above).
      auto unwindowed = m;
      unwindowed.sliding_window = 0;
      auto a = ltrain::models::build(m, {64}, 96, true),
           b = ltrain::models::build(unwindowed, {64}, 96, true);
      ltrain::models::loadInitialWeights(a, m);
      ltrain::models::loadInitialWeights(b, unwindowed);
      a->eval(), b->eval();
      auto ids = torch::randint(96, {1, 24}, torch::kLong);
      CHECK(maxDiff(a->forward(ids).detach(), b->forward(ids).detach()) > 1e-3);
    }
  }
}

TEST_CASE("a config.json that disagrees with the YAML, or that ltrain cannot run, is refused",
          "[parity][hf]") {
  TempDir dir;
  python({"make-llama", dir / "llama", "--vocab", "64"});
  const std::string file = dir / "llama/config.json";
  CHECK_THROWS_WITH(
      hfConfig(dir / "llama", "  n_layer: 3\n"),
      Contains("test.yaml:4: model.n_layer is 3 but '" + file + "' has num_hidden_layers 2"));
  CHECK_THROWS_WITH(hfConfig(dir / "llama", "  name: gpt\n"),
                    Contains("model.name is 'gpt' but '" + file + "' has model_type llama"));
  CHECK_THROWS_WITH(
      hfConfig(dir / "llama", "  block_size: 4096\n"),
      Contains("model.block_size 4096 exceeds the model's max_position_embeddings 128"));
  CHECK_NOTHROW(hfConfig(dir / "llama", "  n_layer: 2\n  block_size: 64\n"));
  auto j = ltrain::io::readJsonFile(file);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  writeText(file, j.dump());
  CHECK_THROWS_WITH(hfConfig(dir / "llama"), Contains("rope_scaling is set, which ltrain's llama "
                                                      "does not implement"));
  std::filesystem::create_directory(dir / "empty");
  CHECK_THROWS_WITH(hfConfig(dir / "empty"), Contains("is a directory without config.json"));
  // Weights that do not fit the architecture: named by tensor.
  python({"make-llama", dir / "small", "--vocab", "64"});
  auto cfg = hfConfig(dir / "small").cfg;
  cfg.model.intermediate_size = 96;
  auto model = ltrain::models::build(cfg.model, {16}, 64, true);
  CHECK_THROWS_WITH(ltrain::models::loadInitialWeights(model, cfg.model),
                    Contains("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [80, 32], "
                             "the model expects [96, 32]"));
}

TEST_CASE(
    "trained from transformers' weights, ltrain's export loads back into transformers with "
    "ltrain's logits, and greedy generation agrees",
    "[parity][slow][hf]") {
  TempDir dir;
  auto prep = runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/scripts/prepare_tokens.py",
       "/usr/share/games/fortunes/cookie", "--out", dir / "data", "--vocab-size", "320"});
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  for (const std::string arch : {"llama", "gpt2", "qwen3", "mistral", "mixtral", "qwen3_moe"}) {
    INFO(arch);
    const std::string hf = dir / (arch + "-in");
    python({"make-" + arch, hf, "--vocab", "320", "--seed", "11"});
    writeText(dir / (arch + ".yaml"),
              "seed: 3\n"
              "data: {dataset: tokens, path: " +
                  (dir / "data") +
                  ", batch_size: 8, eval_batch_size: 16}\n"
                  "model: {init_from: " +
                  hf + (arch != "gpt2" ? ", block_size: 32" : "") +
                  "}\n"
                  "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
                  "train: {max_steps: 6, log_every: 2, eval_every: 0, threads: 1}\n");
    const std::string run = dir / (arch + "-run"), out = dir / (arch + "-out");
    auto t = ltrain::test::runLtrain({"train", dir / (arch + ".yaml"), "--output-dir", run});
    INFO(t.err);
    REQUIRE(t.exit_code == 0);
    CHECK_THAT(t.out + t.err, Contains(" parameters from " + hf + ", "));  // where they start
    auto e = ltrain::test::runLtrain({"export", "--run", run, "--hf", out});
    INFO(e.err);
    REQUIRE(e.exit_code == 0);
    CHECK(std::filesystem::exists(out + "/tokenizer.json"));
    CHECK(std::filesystem::exists(out + "/.ltrain"));

    // ltrain's logits from the run's final weights, transformers' from the export.
    ltrain::inference::InferenceRequest req;
    req.run = run;
    auto lm = ltrain::inference::loadTrainedModel(req, /*need_codec=*/true);
    lm.model->eval();
    auto ids = torch::randint(320, {2, 20}, torch::kLong);
    auto mine = lm.model->forward(ids).detach();
    auto start = ltrain::io::loadSafetensors(hf + "/model.safetensors");
    const double diff = maxDiff(mine, theirLogits(dir, out, ids));
    INFO("max abs logit difference " << diff);
    CHECK(diff <= 1e-5);
    CHECK(maxDiff(mine, theirLogits(dir, hf, ids)) > 1e-3);  // and it trained away from the start

    const std::string prompt = "The meaning of life is";
    auto g = ltrain::test::runLtrain({"generate", "--run", run, "--prompt", prompt,
                                      "--max-new-tokens", "24", "--temperature", "0"});
    INFO(g.err);
    REQUIRE(g.exit_code == 0);
    CHECK_THAT(g.err, Contains("generated 24 tokens in"));
    CHECK_THAT(g.err, Contains("tokens/s"));
    std::vector<std::string> argv{
        LTRAIN_PYTHON, kTools, "generate", out, dir / "data/tokenizer.json", prompt, "24"};
    auto p = runProcess(argv);
    INFO(p.err);
    REQUIRE(p.exit_code == 0);
    const auto theirs = ltrain::io::parseJsonOrDiscard(p.out);
    REQUIRE(theirs.is_object());
    CHECK(g.out == theirs["text"].get<std::string>() + "\n");
  }
}

TEST_CASE("the Python reference Llama of the benches is transformers' Llama, logit for logit",
          "[parity][hf]") {
  auto r = runProcess({LTRAIN_PYTHON, kTools, "eager-vs-transformers"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(r.out, Contains("max |diff| "));
  const double diff = std::stod(r.out.substr(r.out.find("max |diff| ") + 11));
  CHECK(diff <= 1e-5);
}
