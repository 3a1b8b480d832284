// The round-2 features on the GPU, run by scripts/gpu_check.sh ("ltrain_tests [cuda]"): ZeRO-1,
// -2 and -3 on one GPU over NCCL (a group of one: its reduce-scatters, all-gathers and unit
// hooks), activation checkpointing with dropout (the CUDA generator replayed), generation with
// the KV cache, the image loader feeding the GPU, and model.init_from onto the GPU. Without a
// CUDA device each case says so and checks nothing (support/cuda_expect.h).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/config/schema.h"
#include "ltrain/models/generate.h"
#include "ltrain/models/model.h"
#include "support/cuda_expect.h"
#include "support/png_writer.h"
#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::haveCuda;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {

// 12 steps of a small GPT with dropout on the GPU, one process.
std::vector<std::string> gpuGpt(const TempDir& dir, const std::string& out,
                                std::vector<std::string> extra) {
  std::vector<std::string> a{"train",
                             dir / "c.yaml",
                             "data.dataset=text",
                             "data.path=" + (dir / "t.txt"),
                             "data.batch_size=4",
                             "model.name=gpt",
                             "model.n_layer=3",
                             "model.n_head=2",
                             "model.n_embd=32",
                             "model.block_size=32",
                             "model.dropout=0.1",
                             "optimizer.name=adamw",
                             "optimizer.lr=0.003",
                             "train.clip_grad_norm=0.5",
                             "train.max_steps=12",
                             "train.log_every=4",
                             "train.device=cuda"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.insert(a.end(), {"--output-dir", out});
  return a;
}

void corpus(const TempDir& dir) {
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(200));
}

std::string weights(const TempDir& dir, const std::string& run) {
  return dir / (run + "/model.safetensors");
}

}  // namespace

TEST_CASE("ZeRO-1, -2 and -3 on one GPU over NCCL train to the plain GPU run's weights", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  corpus(dir);
  auto plain = runLtrain(gpuGpt(dir, dir / "plain", {"train.grad_accum=2"}));
  INFO(plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  for (const std::string zero : {"1", "2", "3"}) {
    auto r = runLtrain(gpuGpt(
        dir, dir / ("z" + zero),
        {"train.grad_accum=2", "dist.backend=nccl", "dist.zero=" + zero, "--nproc-per-node", "1"}));
    INFO("zero " << zero << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("on nccl"));
    CHECK_THAT(r.out, Contains("ZeRO-" + zero));
    const double d = ltrain::test::maxWeightDiff(weights(dir, "plain"), weights(dir, "z" + zero));
    INFO("max |plain - zero" << zero << "| = " << d);
    CHECK(d < 1e-4);  // the GPU's kernels sum in their own orders
  }
}

TEST_CASE("activation checkpointing with dropout on the GPU trains to the plain weights",
          "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  corpus(dir);
  REQUIRE(runLtrain(gpuGpt(dir, dir / "plain", {})).exit_code == 0);
  auto r = runLtrain(gpuGpt(dir, dir / "ckpt", {"train.activation_checkpointing=blocks"}));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Contains("activation checkpointing: 3 recomputed run(s)"));
  // The recomputed blocks draw the same dropout masks from the CUDA generator as the forward.
  const double d = ltrain::test::maxWeightDiff(weights(dir, "plain"), weights(dir, "ckpt"));
  INFO("max |plain - checkpointed| = " << d);
  CHECK(d < 1e-5);
}

TEST_CASE("generation with the KV cache on the GPU gives the tokens of the whole context",
          "[cuda]") {
  if (!haveCuda()) return;
  for (const std::string name : {"gpt", "llama"}) {
    INFO(name);
    auto cfg = ltrain::config::defaults();
    cfg.model.name = name, cfg.model.n_layer = 2, cfg.model.n_head = 4, cfg.model.n_kv_head = 2;
    cfg.model.n_embd = 32, cfg.model.intermediate_size = 48, cfg.model.block_size = 64;
    torch::manual_seed(4);
    auto m = ltrain::models::build(cfg.model, {64}, 50, true);
    m->to(torch::kCUDA);
    m->eval();
    const std::vector<int64_t> prompt{3, 14, 15, 9, 2};
    ltrain::models::SamplingOptions o;
    o.temperature = 0;
    o.max_new_tokens = 20;
    const auto cached = ltrain::models::generate(m, 64, prompt, o, torch::kCUDA);
    // The same greedy tokens from the whole context through forward(), step by step.
    torch::NoGradGuard no_grad;
    std::vector<int64_t> ctx = prompt, uncached;
    for (int i = 0; i < 20; ++i) {
      auto logits = m->forward(torch::tensor(ctx, torch::kLong).view({1, -1}).to(torch::kCUDA));
      uncached.push_back(logits[0][-1].argmax().item<int64_t>());
      ctx.push_back(uncached.back());
    }
    CHECK(cached == uncached);
  }
}

TEST_CASE("the image loader feeds the GPU: PNG class folders train on cuda, worker threads on",
          "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  // Dark and light gray squares with noise, PNG files written here (no Pillow needed).
  uint32_t seed = 1;
  for (const std::string split : {"train", "val"}) {
    for (int label = 0; label < 2; ++label) {
      const std::string cls = dir / ("img/" + split + (label ? "/light" : "/dark"));
      std::filesystem::create_directories(cls);
      for (int i = 0; i < (split == "train" ? 32 : 16); ++i) {
        std::vector<uint8_t> px(20 * 24);
        for (auto& v : px)
          seed = seed * 1664525u + 1013904223u,
          v = static_cast<uint8_t>(label * 140 + (seed >> 26));
        ltrain::test::writePng(cls + "/" + std::to_string(i) + ".png", 20, 24, 1, px);
      }
    }
  }
  ltrain::test::writeText(dir / "c.yaml", "name: img\n");
  auto r = runLtrain({"train", dir / "c.yaml", "data.dataset=image_folder",
                      "data.path=" + (dir / "img"), "data.channels=1", "data.image_size=16",
                      "data.batch_size=8", "data.num_workers=2", "data.augment=resized_crop_flip",
                      "model.name=cnn", "model.channels=[8]", "model.fc=[16]", "train.epochs=4",
                      "train.device=cuda", "--output-dir", dir / "run"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["test_accuracy"].get<double>() > 0.9);
}

TEST_CASE("model.init_from puts a file's weights on the GPU: the CPU run's losses", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  corpus(dir);
  // Weights that are not the seeded init: a short CPU run's.
  REQUIRE(runLtrain(gpuGpt(dir, dir / "first", {"train.device=cpu"})).exit_code == 0);
  const std::vector<std::string> from{"model.init_from=" + weights(dir, "first"), "model.dropout=0",
                                      "train.max_steps=4", "train.log_every=1"};
  auto cpu = from, gpu = from;
  cpu.push_back("train.device=cpu");
  REQUIRE(runLtrain(gpuGpt(dir, dir / "cpu", cpu)).exit_code == 0);
  auto r = runLtrain(gpuGpt(dir, dir / "gpu", gpu));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto a = ltrain::test::trainLosses(dir / "cpu/metrics.jsonl"),
             b = ltrain::test::trainLosses(dir / "gpu/metrics.jsonl");
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (const auto& [step, loss] : a) CHECK(b.at(step) == Approx(loss).epsilon(1e-4));
  // The seeded init would start elsewhere: the file's weights were used.
  auto seeded = from;
  seeded.erase(seeded.begin());
  REQUIRE(runLtrain(gpuGpt(dir, dir / "seeded", seeded)).exit_code == 0);
  CHECK(ltrain::test::trainLosses(dir / "seeded/metrics.jsonl").at(1) !=
        Approx(b.at(1)).epsilon(1e-3));
}

TEST_CASE(
    "two ranks share one GPU over Gloo: DDP, ZeRO-3 and tp 2 on CUDA tensors train as one GPU "
    "process does",
    "[cuda][gloo-gpu]") {
  if (!haveCuda()) return;
  // NCCL refuses two ranks on one device, so on a machine with one GPU this is the only way the
  // sharded and split code runs its collectives on CUDA tensors between peers (Gloo copies them
  // through the host). Two replicas of batch 4 see what one process of batch 8 sees.
  TempDir dir;
  corpus(dir);
  const std::vector<std::string> common{"model.dropout=0", "train.grad_accum=1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  REQUIRE(runLtrain(gpuGpt(dir, dir / "one", with({"data.batch_size=8"}))).exit_code == 0);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"ddp", {"dist.backend=gloo", "--nproc-per-node", "2"}},
      {"zero3", {"dist.backend=gloo", "dist.zero=3", "--nproc-per-node", "2"}},
      {"tp2",
       {"data.batch_size=8", "dist.backend=gloo", "dist.tensor_parallel=2", "--nproc-per-node",
        "2"}},
  };
  for (const auto& [name, extra] : cases) {
    auto r = runLtrain(gpuGpt(dir, dir / name, with(extra)));
    INFO(name << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("gloo"));
    const double d = ltrain::test::maxWeightDiff(weights(dir, "one"), weights(dir, name));
    INFO("max |one process - " << name << "| = " << d);
    CHECK(d < 1e-4);  // the GPU's kernels sum in their own orders
  }
}
