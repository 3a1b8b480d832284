// LoRA against the real thing. transformers makes a small Llama and PEFT an adapter for it (B
// drawn, not zero); ltrain (finetune.adapter_from) and PEFT + PyTorch (bench/reference/
// train_ref.py, under the real torchrun for two processes) train the same adapters on the same
// batches with AdamW and clipping: the same loss at each of 20 steps, the same final adapters, and
// the base untouched. PEFT then loads ltrain's export --peft onto transformers' base, and
// transformers its merged export --hf: both give ltrain's logits.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/load.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/lora.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "support/reference_run.h"
#include "support/run_files.h"
#include "test_paths.h"

using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {

const std::string kSrc = LTRAIN_SOURCE_DIR;
const std::string kTools = kSrc + "/tests/parity/hf_tools.py";

void run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {}) {
  auto r = runProcess(argv, env);
  INFO(argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << ":\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

double maxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a - b).abs().max().item<double>();
}

struct AdapterRun {
  std::string tokens, base, adapter, config;
};

// Fortune-cookie token shards, a small transformers Llama, a PEFT adapter of rank 4 for it
// (make-adapter with `adapter_args`), and a config that trains the adapter from them for 20
// logged steps with `optimizer` (YAML lines) and clipping.
AdapterRun adapterRun(const TempDir& dir, const std::vector<std::string>& adapter_args,
                      const std::string& optimizer) {
  AdapterRun r{dir / "tokens", dir / "base", dir / "adapter", dir / "run.yaml"};
  run({LTRAIN_PYTHON, kSrc + "/scripts/prepare_tokens.py", "/usr/share/games/fortunes/cookie",
       "--out", r.tokens, "--vocab-size", "384"});
  run({LTRAIN_PYTHON, kTools, "make-llama", r.base, "--vocab", "384"});
  std::vector<std::string> make{LTRAIN_PYTHON, kTools, "make-adapter", r.base, r.adapter,
                                "--rank",      "4",    "--alpha",      "8"};
  make.insert(make.end(), adapter_args.begin(), adapter_args.end());
  run(make);
  ltrain::test::writeText(r.config,
                          "seed: 1\n"
                          "data: {dataset: tokens, path: " +
                              r.tokens +
                              ", batch_size: 8}\n"
                              "model: {init_from: " +
                              r.base +
                              ", block_size: 32}\n"
                              "finetune: {adapter_from: " +
                              r.adapter + "}\n" + optimizer +
                              "train: {max_steps: 20, log_every: 1, threads: 1, "
                              "eval_every: 0,\n"
                              "        checkpoint_every: 0, clip_grad_norm: 1.0}\n");
  return r;
}

}  // namespace

TEST_CASE(
    "LoRA from a PEFT adapter trains as PEFT and PyTorch do, alone, under DDP and ZeRO-1 and "
    "ZeRO-3",
    "[parity][slow][hf]") {
  TempDir dir;
  const auto [tokens, base, adapter, config] =
      adapterRun(dir, {"--targets", "q_proj,v_proj"},
                 "optimizer: {name: adamw, lr: 0.01, weight_decay: 0.01}\n"
                 "scheduler: {name: cosine, warmup_steps: 3}\n");
  const auto base_weights = ltrain::io::loadSafetensors(base + "/model.safetensors");

  // ZeRO-1 and ZeRO-3 against PEFT under DDP: per element the same arithmetic. Under ZeRO-3
  // the frozen base is sharded too (no rank holds it whole), and only the adapters reduce.
  struct Split {
    std::string name;
    int processes;
    std::vector<std::string> overrides;
  };
  for (const auto& [name, n, overrides] :
       {Split{"1", 1, {}}, Split{"2", 2, {}}, Split{"2-zero1", 2, {"dist.zero=1"}},
        Split{"2-zero3", 2, {"dist.zero=3", "dist.fsdp_prefetch=true"}}}) {
    INFO(name << " process(es)");
    const std::string py = dir / ("py" + name), lt = dir / ("lt" + name),
                      peft = dir / ("peft" + name);
    // The reference trains each process count once.
    const auto losses = ltrain::test::trainBesideReference(config, base + "/model.safetensors", n,
                                                           py, lt, overrides);
    if (name == "2-zero3") {  // each rank holds half the base, half the adapters' state
      using ltrain::test::summaryValue;
      const std::string ddp = dir / "lt2";
      for (const char* key : {"parameter_mb", "optimizer_state_mb"}) {
        INFO(key << ": ddp " << summaryValue(ddp, key) << ", zero-3 " << summaryValue(lt, key));
        CHECK(summaryValue(lt, key) == Approx(summaryValue(ddp, key) / 2).epsilon(0.1));
      }
    }
    const auto& a = losses.reference;
    REQUIRE(a.size() == 20);
    INFO(losses.describe());
    CHECK(losses.worstRelative() <= 1e-5);
    CHECK(a.at(20) < a.at(1));  // it trained

    // The adapters PEFT trained, under its names, against ltrain's export of its own.
    run({LTRAIN_BINARY, "export", "--run", lt, "--peft", peft});
    auto theirs = ltrain::io::loadSafetensors(py + "/model.safetensors");
    auto mine = ltrain::io::loadSafetensors(peft + "/adapter_model.safetensors");
    REQUIRE(theirs.size() == 8);  // q and v of two layers, A and B
    REQUIRE(mine.size() == theirs.size());
    double adapters = 0;
    for (auto& [name, t] : theirs) {
      INFO(name);
      REQUIRE(mine.count(name));
      adapters = std::max(adapters, maxDiff(t, mine.at(name)));
    }
    INFO("final adapters max abs diff " << adapters);
    CHECK(adapters <= 1e-5);
    CHECK(adapters > 0);  // (they moved: step 1's weights are not step 20's)
    // The base is frozen: the run's weights hold it as it was read.
    auto run_weights = ltrain::io::loadSafetensors(lt + "/model.safetensors");
    for (auto& [name, t] : base_weights) {
      INFO(name);
      REQUIRE(run_weights.count(name));
      CHECK(torch::equal(run_weights.at(name), t));
    }
  }

  // PEFT loads ltrain's adapter onto transformers' base; transformers loads the merged export.
  const std::string peft = dir / "peft1", merged = dir / "merged";
  auto lc = ltrain::config::loadConfigText("data: {dataset: tokens}\nmodel: {init_from: " + base +
                                               "}\nfinetune: {adapter_from: " + peft + "}\n",
                                           "test.yaml", {});
  torch::manual_seed(1);
  auto model = ltrain::models::build(lc.cfg.model, {32}, 384, /*tokens=*/true);
  ltrain::models::loadInitialWeights(model, lc.cfg.model);
  ltrain::models::applyLora(model, lc.cfg.lora);
  ltrain::models::loadAdapter(model, lc.cfg.model, peft);
  model->eval();
  const auto ids = torch::randint(384, {2, 24}, torch::kLong);
  const auto mine = model->forward(ids).detach();
  ltrain::io::saveSafetensors(dir / "ids.safetensors", {{"ids", ids}});
  run({LTRAIN_PYTHON, kTools, "peft-logits", base, peft, dir / "ids.safetensors",
       dir / "peft_logits.safetensors"});
  const double by_peft =
      maxDiff(mine, ltrain::io::loadSafetensors(dir / "peft_logits.safetensors").at("logits"));
  INFO("PEFT's logits against ltrain's: max abs diff " << by_peft);
  CHECK(by_peft <= 1e-5);
  run({LTRAIN_BINARY, "export", "--run", dir / "lt1", "--hf", merged});
  run({LTRAIN_PYTHON, kTools, "logits", merged, dir / "ids.safetensors",
       dir / "merged_logits.safetensors"});
  const double by_merged =
      maxDiff(mine, ltrain::io::loadSafetensors(dir / "merged_logits.safetensors").at("logits"));
  INFO("transformers' logits of the merged export against ltrain's: max abs diff " << by_merged);
  CHECK(by_merged <= 1e-5);

  // generate and eval run the LoRA run directly.
  auto g = runProcess({LTRAIN_BINARY, "generate", "--run", dir / "lt1", "--prompt", "The ",
                       "--max-new-tokens", "8"});
  INFO(g.err);
  CHECK(g.exit_code == 0);
  auto e = runProcess({LTRAIN_BINARY, "eval", "--run", dir / "lt1"});
  INFO(e.err);
  CHECK(e.exit_code == 0);
  CHECK(e.out.find("val_perplexity") != std::string::npos);
  // eval scores the model as it starts too: the base with the adapter it starts from.
  auto before = runProcess({LTRAIN_BINARY, "eval", config});
  INFO(before.err);
  CHECK(before.exit_code == 0);
  CHECK(before.out.find("val_loss") != std::string::npos);
  CHECK(before.out != e.out);
}

TEST_CASE("DoRA from a PEFT adapter trains as PEFT does and goes back out as PEFT's files",
          "[parity][slow][hf]") {
  TempDir dir;
  // B drawn and the magnitudes moved off the norms they start at: every term of DoRA counts.
  const auto [tokens, base, adapter, config] =
      adapterRun(dir, {"--targets", "q_proj,v_proj,down_proj", "--dora"},
                 "optimizer: {name: adamw, lr: 0.003, weight_decay: 0.01}\n");
  const auto lc =
      ltrain::config::loadConfigText("data: {dataset: tokens}\nmodel: {init_from: " + base +
                                         "}\nfinetune: {adapter_from: " + adapter + "}\n",
                                     "test.yaml", {});
  CHECK(lc.cfg.lora.use_dora);  // from adapter_config.json
  const std::string py = dir / "py", lt = dir / "lt", peft = dir / "peft", merged = dir / "merged";
  const auto losses =
      ltrain::test::trainBesideReference(config, base + "/model.safetensors", 1, py, lt);
  REQUIRE(losses.reference.size() == 20);
  INFO(losses.describe());
  CHECK(losses.worstRelative() <= 1e-5);

  // The trained A, B and magnitudes, under PEFT's names, against PEFT's own.
  run({LTRAIN_BINARY, "export", "--run", lt, "--peft", peft});
  auto theirs = ltrain::io::loadSafetensors(py + "/model.safetensors");
  auto mine = ltrain::io::loadSafetensors(peft + "/adapter_model.safetensors");
  REQUIRE(theirs.size() == 18);  // q, v and down of two layers: A, B and the magnitude
  REQUIRE(mine.size() == theirs.size());
  double worst = 0;
  for (auto& [name, t] : theirs) {
    INFO(name);
    REQUIRE(mine.count(name));
    worst = std::max(worst, maxDiff(t, mine.at(name)));
  }
  INFO("final adapters max abs diff " << worst);
  CHECK(worst <= 1e-5);
  CHECK(ltrain::test::readJson(peft + "/adapter_config.json")["use_dora"].get<bool>());
  // They trained: every tensor, the magnitudes included, moved from where it started.
  const auto start = ltrain::io::loadSafetensors(adapter + "/adapter_model.safetensors");
  for (auto& [name, t] : start) {
    INFO(name);
    CHECK(maxDiff(t, mine.at(name)) > 1e-4);
  }

  // PEFT loads the exported adapter onto transformers' base, transformers the merged export: both
  // give ltrain's logits.
  torch::manual_seed(1);
  auto model = ltrain::models::build(lc.cfg.model, {32}, 384, /*tokens=*/true);
  ltrain::models::loadInitialWeights(model, lc.cfg.model);
  ltrain::models::applyLora(model, lc.cfg.lora);
  ltrain::models::loadAdapter(model, lc.cfg.model, peft);
  model->eval();
  const auto ids = torch::randint(384, {2, 24}, torch::kLong);
  const auto logits = model->forward(ids).detach();
  ltrain::io::saveSafetensors(dir / "ids.safetensors", {{"ids", ids}});
  run({LTRAIN_PYTHON, kTools, "peft-logits", base, peft, dir / "ids.safetensors",
       dir / "peft_logits.safetensors"});
  CHECK(maxDiff(logits,
                ltrain::io::loadSafetensors(dir / "peft_logits.safetensors").at("logits")) <= 1e-5);
  run({LTRAIN_BINARY, "export", "--run", lt, "--hf", merged});
  run({LTRAIN_PYTHON, kTools, "logits", merged, dir / "ids.safetensors",
       dir / "merged_logits.safetensors"});
  CHECK(maxDiff(logits,
                ltrain::io::loadSafetensors(dir / "merged_logits.safetensors").at("logits")) <=
        1e-5);
}
