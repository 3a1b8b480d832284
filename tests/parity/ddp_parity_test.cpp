// Parity with PyTorch: from the same initial weights (safetensors written by Python), ltrain with 2
// processes and Python's DistributedDataParallel under the real torchrun (Gloo, CPU, fp32) give the
// same loss at each of 50 steps (1e-5 relative) and the same final weights (1e-5 absolute).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sstream>

#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using ltrain::test::readText;
using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {
const std::string kRef = std::string(LTRAIN_SOURCE_DIR) + "/bench/reference/train_ref.py";
}  // namespace

TEST_CASE("ltrain and Python DDP agree step by step from the same weights", "[parity][slow][hf]") {
  const std::string mlp = std::string(LTRAIN_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
  // The llama case trains on fortunes tokenised by scripts/prepare_tokens.py.
  TempDir tokens;
  auto prep = runProcess(
      {LTRAIN_PYTHON, std::string(LTRAIN_SOURCE_DIR) + "/scripts/prepare_tokens.py",
       "/usr/share/games/fortunes/cookie", "--out", tokens.path(), "--vocab-size", "384"});
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  struct Case {
    std::string name;
    std::vector<std::string> overrides;
    std::string config = "";  // empty: the MLP's
  };
  std::vector<Case> cases{
      {"sgd-momentum",
       {"optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9",
        "scheduler.name=constant", "scheduler.warmup_steps=0"}},
      {"adamw-cosine",
       {"optimizer.name=adamw", "optimizer.lr=0.001", "optimizer.weight_decay=0.01",
        "scheduler.name=cosine", "scheduler.warmup_steps=5"}},
      // A network written as layers: convolutions, batch norm (its buffers broadcast each step)
      // and a residual block.
      {"layers-conv-residual",
       {"model.name=layers", "~model.hidden",
        "model.layers=[{conv2d: {out: 8, kernel: 3, padding: 1}}, {batch_norm2d: {}}, relu, "
        "{max_pool2d: 2}, {residual: [{conv2d: {out: 8, kernel: 3, padding: 1}}, relu]}, "
        "{max_pool2d: 2}, flatten, {linear: 32}, relu, {linear: 10}]",
        "optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9",
        "scheduler.name=constant", "scheduler.warmup_steps=0"}},
      // Llama's block (transformers' LlamaForCausalLM on the Python side) with grouped-query
      // attention, weight decay on matrices only (parameter groups in Python), the wsd schedule.
      {"llama-gqa-wsd",
       {"data.path=" + tokens.path(), "model.vocab_size=384", "model.n_layer=2", "model.n_embd=48",
        "model.n_head=4", "model.n_kv_head=2", "model.intermediate_size=96", "model.block_size=32",
        "model.tie_weights=false", "optimizer.lr=0.003", "optimizer.weight_decay=0.1",
        "scheduler.warmup_steps=5", "scheduler.decay_fraction=0.3", "data.batch_size=8",
        "train.eval_every=0", "train.checkpoint_every=0"},
       std::string(LTRAIN_SOURCE_DIR) + "/configs/llama_tokens.yaml"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string config = c.config.empty() ? mlp : c.config;
    TempDir dir;
    std::vector<std::string> common = c.overrides;
    if (c.config.empty()) common.push_back("data.batch_size=32");
    common.insert(common.end(), {"train.max_steps=50", "train.log_every=1", "train.threads=1"});
    // Python writes the seeded initial weights both sides start from.
    std::vector<std::string> save{LTRAIN_PYTHON, kRef, config};
    save.insert(save.end(), common.begin(), common.end());
    save.insert(save.end(), {"--ltrain", LTRAIN_BINARY, "--out", dir / "init", "--save-init",
                             dir / "init.safetensors"});
    auto s = runProcess(save);
    INFO(s.err);
    REQUIRE(s.exit_code == 0);

    // --standalone: torchrun binds its own free port (a port picked here could be taken meanwhile).
    std::vector<std::string> py{LTRAIN_TORCHRUN, "--standalone", "--nproc-per-node", "2", kRef,
                                config};
    py.insert(py.end(), common.begin(), common.end());
    py.insert(py.end(),
              {"--ltrain", LTRAIN_BINARY, "--init", dir / "init.safetensors", "--out", dir / "py"});
    auto p = runProcess(py, {{"OMP_NUM_THREADS", "1"}});
    INFO(p.out << p.err);
    REQUIRE(p.exit_code == 0);

    std::vector<std::string> lt{LTRAIN_BINARY, "train", config};
    lt.insert(lt.end(), common.begin(), common.end());
    lt.insert(lt.end(), {"model.init_from=" + (dir / "init.safetensors"), "--nproc-per-node", "2",
                         "--output-dir", dir / "lt"});
    auto l = runProcess(lt);
    INFO(l.out << l.err);
    REQUIRE(l.exit_code == 0);

    auto a = ltrain::test::trainLosses(dir / "py/metrics.jsonl");
    auto b = ltrain::test::trainLosses(dir / "lt/metrics.jsonl");
    REQUIRE(a.size() == 50);
    REQUIRE(b.size() == 50);
    double worst = 0;
    for (auto& [step, loss] : a) worst = std::max(worst, std::abs(loss - b[step]) / std::abs(loss));
    INFO("worst relative loss difference " << worst << "; step 1: " << a[1] << " vs " << b[1]
                                           << ", step 50: " << a[50] << " vs " << b[50]);
    CHECK(worst <= 1e-5);
    CHECK(a[50] < a[1]);  // it trained

    auto wa = ltrain::io::loadSafetensors(dir / "py/model.safetensors");
    auto wb = ltrain::io::loadSafetensors(dir / "lt/model.safetensors");
    REQUIRE(wa.size() == wb.size());
    double max_diff = 0;
    for (auto& [name, t] : wa) {
      REQUIRE(wb.count(name));
      max_diff = std::max(max_diff, (t - wb[name]).abs().max().item<double>());
    }
    INFO("final weights max abs diff " << max_diff);
    CHECK(max_diff <= 1e-5);
    // And Python's safetensors reads ltrain's file under the same names.
    auto names = runProcess({LTRAIN_PYTHON, "-c",
                             "import sys; from safetensors.torch import load_file; "
                             "print(' '.join(sorted(load_file(sys.argv[1]))))",
                             dir / "lt/model.safetensors"});
    CHECK(names.exit_code == 0);
    if (c.name.rfind("llama", 0) == 0)
      CHECK_THAT(names.out, Catch::Matchers::StartsWith("lm_head.weight model.embed_tokens.weight "
                                                        "model.layers.0.input_layernorm.weight"));
    else if (c.name.rfind("layers", 0) != 0)
      CHECK(names.out ==
            "layers.1.bias layers.1.weight layers.3.bias layers.3.weight layers.5.bias "
            "layers.5.weight "
            "layers.7.bias layers.7.weight\n");
  }
}
