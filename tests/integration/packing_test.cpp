// data.packing: several chat examples to a block, each token attending only to its own example's
// earlier tokens, positions counted from each example's start (models/packing.h). An example's
// logits in a packed block equal its logits alone, for every transformer family (Mistral's
// sliding window included); and a run that packs two examples to a block, one block a batch,
// trains exactly as the run that gives the same two examples one a block, two a batch: the same
// tokens learned, the same loss at every step.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/config/schema.h"
#include "ltrain/data/chat_examples.h"
#include "ltrain/models/model.h"
#include "ltrain/models/packing.h"
#include "support/chat_files.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using ltrain::test::runProcess;
using ltrain::test::TempDir;

TEST_CASE("an example's logits in a packed block are its logits alone, in every family") {
  for (const std::string name : {"llama", "gpt", "qwen3", "mistral"}) {
    INFO(name);
    auto cfg = ltrain::config::defaults();
    cfg.model.name = name;
    cfg.model.n_layer = 2, cfg.model.n_head = 2, cfg.model.n_embd = 16, cfg.model.block_size = 16;
    cfg.model.intermediate_size = 24, cfg.model.n_kv_head = name == "gpt" ? 0 : 1;
    if (name == "mistral") cfg.model.sliding_window = 3;  // shorter than the examples
    torch::manual_seed(2);
    auto model = ltrain::models::build(cfg.model, {16}, 29, /*tokens=*/true);
    model->eval();
    torch::NoGradGuard no_grad;
    const std::vector<int64_t> lengths{5, 3, 6};  // and 2 tokens of padding
    const auto tokens = torch::randint(1, 29, {1, 16}, torch::kLong);
    auto positions = torch::zeros({1, 16}, torch::kLong);
    int64_t at = 0;
    for (const int64_t n : lengths) {
      positions.narrow(1, at, n).copy_(torch::arange(n, torch::kLong).view({1, n}));
      at += n;
    }
    torch::Tensor packed;
    {
      ltrain::models::PackedPositions scope(positions);
      packed = model->forward(tokens);
    }
    CHECK(ltrain::models::packedPositions() == nullptr);  // the scope ended with the forward
    at = 0;
    for (const int64_t n : lengths) {
      const auto alone = model->forward(tokens.narrow(1, at, n));
      CHECK(torch::allclose(packed.narrow(1, at, n), alone, 1e-5, 1e-5));
      at += n;
    }
    // Unpacked, the later examples see the earlier ones: the check above can fail.
    const auto whole = model->forward(tokens);
    CHECK_FALSE(
        torch::allclose(whole.narrow(1, 5, 3), model->forward(tokens.narrow(1, 5, 3)), 1e-5, 1e-5));
  }
}

TEST_CASE("packing two examples to a block trains as two examples a batch, step for step") {
  TempDir dir;
  std::filesystem::create_directories(dir / "chats");
  ltrain::test::writeChatExamples(dir / "chats/train.safetensors", 16, 1);
  ltrain::test::writeChatExamples(dir / "chats/val.safetensors", 4, 2);
  for (const std::string family : {"llama", "gpt"}) {
    INFO(family);
    const std::string common =
        "seed: 3\n"
        "model: {name: " +
        family +
        ", n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 50, block_size: 20}\n"
        "optimizer: {name: adamw, lr: 0.01}\n"
        "train: {max_steps: 8, log_every: 1, threads: 1, eval_every: 0, checkpoint_every: 0}\n";
    ltrain::test::writeText(dir / "packed.yaml",
                            common + "data: {dataset: chat, path: " + (dir / "chats") +
                                ", shuffle: false, batch_size: 1, packing: true}\n");
    ltrain::test::writeText(dir / "unpacked.yaml",
                            common + "data: {dataset: chat, path: " + (dir / "chats") +
                                ", shuffle: false, batch_size: 2}\n");
    for (const std::string run : {"packed", "unpacked"}) {
      auto r = runProcess({LTRAIN_BINARY, "train", dir / (run + ".yaml"), "--output-dir",
                           dir / (family + "_" + run)});
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      if (run == "packed")
        CHECK_THAT(r.out, Catch::Matchers::Contains(
                              "8 training / 4 val blocks of 20 tokens (vocabulary 50; training "
                              "examples packed)"));
    }
    const auto packed = ltrain::test::trainLosses(dir / (family + "_packed/metrics.jsonl"));
    const auto unpacked = ltrain::test::trainLosses(dir / (family + "_unpacked/metrics.jsonl"));
    REQUIRE(packed.size() == 8);
    REQUIRE(unpacked.size() == 8);
    for (const auto& [step, loss] : unpacked) {
      INFO("step " << step << ": unpacked " << loss << ", packed " << packed.at(step));
      CHECK(std::abs(packed.at(step) - loss) <= 1e-5 * loss);
    }
    CHECK(unpacked.at(8) < unpacked.at(1));
    const double a = ltrain::test::summaryValue(dir / (family + "_packed"), "test_loss"),
                 b = ltrain::test::summaryValue(dir / (family + "_unpacked"), "test_loss");
    CHECK(std::abs(a - b) <= 1e-5 * b);
  }
}
