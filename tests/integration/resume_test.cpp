// A run killed mid-epoch and resumed with train.resume=auto yields the same loss curve and the same
// final weights as an uninterrupted run (dropout, shuffling and augmentation on, so RNG, sampler
// and augmentation state matter).
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
std::vector<std::string> args(const std::string& config, const std::string& out,
                              const std::string& accum) {
  return {"train",
          config,
          "data.dataset=synthetic",
          "data.synthetic_shape=[1,6,6]",
          "data.synthetic_train_samples=300",
          "data.synthetic_test_samples=50",
          "data.batch_size=16",
          "data.num_workers=2",
          "model.hidden=[32,16]",
          "model.dropout=0.3",
          "data.augment=crop_flip",  // its draws must resume exactly too
          "data.augment_pad=1",
          "optimizer.name=adamw",
          "scheduler.name=cosine",
          "scheduler.warmup_steps=3",
          "train.epochs=3",
          "train.log_every=1",
          "train.checkpoint_every=4",
          "train.grad_accum=" + accum,
          "--output-dir",
          out};
}
// "step:loss" with the loss as written (every digit of the double).
std::vector<std::string> trainLosses(const std::string& metrics_path) {
  std::vector<std::string> out;
  for (const auto& j : ltrain::test::metricRecords(metrics_path, "train"))
    out.push_back(j["step"].dump() + ":" + j["loss"].dump());
  return out;
}
// Final weights, read back through the library's own checkpoint loader into a matching model.
std::vector<torch::Tensor> modelTensors(const std::string& ckpt) {
  auto cfg = ltrain::config::defaults();
  cfg.model.hidden = {32, 16};
  cfg.model.dropout = 0.3;
  cfg.optimizer.name = ltrain::config::OptimizerName::kAdamw;
  auto m = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  ltrain::checkpoint::loadCheckpoint(ckpt, *m, *opt, {});
  return m->parameters();
}
}  // namespace

TEST_CASE("kill mid-epoch, resume: same losses and weights as an uninterrupted run") {
  for (std::string accum : {"1", "2"}) {
    TempDir dir;
    ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
    auto full = runLtrain(args(dir / "c.yaml", dir / "full", accum));
    REQUIRE(full.exit_code == 0);
    // Killed (SIGKILL) mid-way through the last epoch (19 or 10 steps an epoch): the newest
    // checkpoint is step 44 or 24, so the resumed run restarts inside the epoch the summary
    // reports.
    auto killed = runLtrain(args(dir / "c.yaml", dir / "cut", accum),
                            {{"LTRAIN_FAULT_KILL_AT_STEP", accum == "1" ? "45" : "25"}});
    REQUIRE(killed.exit_code == 128 + 9);
    auto resumed = runLtrain(args(dir / "c.yaml", dir / "cut", accum));
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.err + resumed.out, Catch::Matchers::Contains("resuming from"));

    const auto a = trainLosses(dir / "full/metrics.jsonl");
    const auto b = trainLosses(dir / "cut/metrics.jsonl");
    CHECK(a.size() > 20);
    CHECK(a == b);
    // The summary's mean training loss of the last epoch too, although the run restarted inside it.
    CHECK(ltrain::test::readJson(dir / "full/summary.json")["train_loss"] ==
          ltrain::test::readJson(dir / "cut/summary.json")["train_loss"]);
    const std::string last = accum == "1" ? "step-00000057.pt" : "step-00000030.pt";
    auto wa = modelTensors(dir / ("full/checkpoints/" + last));
    auto wb = modelTensors(dir / ("cut/checkpoints/" + last));
    REQUIRE(wa.size() == wb.size());
    for (size_t i = 0; i < wa.size(); ++i) CHECK(torch::equal(wa[i], wb[i]));
  }
}

TEST_CASE("a corrupt newest checkpoint is reported and the previous one resumes the run") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  auto full = runLtrain(args(dir / "c.yaml", dir / "full", "1"));
  REQUIRE(full.exit_code == 0);
  auto killed =
      runLtrain(args(dir / "c.yaml", dir / "cut", "1"), {{"LTRAIN_FAULT_KILL_AT_STEP", "13"}});
  REQUIRE(killed.exit_code == 128 + 9);
  // One bit of the newest checkpoint (step 12) flips in the middle of its tensor data, as a bad
  // disk or a bad copy would leave it: same size, still a valid zip for torch.
  const std::string newest = dir / "cut/checkpoints/step-00000012.pt";
  std::string bytes = readText(newest);
  bytes[bytes.size() / 2] ^= 0x10;
  ltrain::test::writeText(newest, bytes);
  auto resumed = runLtrain(args(dir / "c.yaml", dir / "cut", "1"));
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out + resumed.err,
             Catch::Matchers::Contains("step-00000012.pt' is unusable: checksum mismatch"));
  CHECK_THAT(resumed.out + resumed.err,
             Catch::Matchers::Contains("resuming from the previous checkpoint"));
  auto wa = modelTensors(dir / "full/checkpoints/step-00000057.pt");
  auto wb = modelTensors(dir / "cut/checkpoints/step-00000057.pt");
  for (size_t i = 0; i < wa.size(); ++i) CHECK(torch::equal(wa[i], wb[i]));
  CHECK(trainLosses(dir / "full/metrics.jsonl") == trainLosses(dir / "cut/metrics.jsonl"));
}

TEST_CASE("train.keep_checkpoints keeps the newest K") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  auto a = args(dir / "c.yaml", dir / "run", "1");
  a.push_back("train.keep_checkpoints=2");
  REQUIRE(runLtrain(a).exit_code == 0);
  auto left = ltrain::checkpoint::checkpointsNewestFirst(dir / "run/checkpoints");
  REQUIRE(left.size() == 2);
  CHECK_THAT(left[0], Catch::Matchers::EndsWith("step-00000057.pt"));
  CHECK_THAT(left[1], Catch::Matchers::EndsWith("step-00000056.pt"));
}

TEST_CASE("resuming with another model is refused, however many checkpoints there are") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  auto killed =
      runLtrain(args(dir / "c.yaml", dir / "run", "1"), {{"LTRAIN_FAULT_KILL_AT_STEP", "13"}});
  REQUIRE(killed.exit_code == 128 + 9);
  REQUIRE(ltrain::checkpoint::checkpointsNewestFirst(dir / "run/checkpoints").size() == 3);
  // The model changed: each checkpoint is refused (the fallback compares against the config's
  // own shapes, not against what the refused one left behind), and nothing trains.
  auto a = args(dir / "c.yaml", dir / "run", "1");
  a.push_back("model.hidden=[8]");
  auto r = runLtrain(a);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("step-00000004.pt' is from another model"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("has shape [32, 36] there, this config's model "
                                              "expects [8, 36]"));
}

TEST_CASE("a gpt checkpoint with one optimizer group resumes only with optimizer.decay=all") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "hello world, the quick brown fox. ";
  ltrain::test::writeText(dir / "t.txt", text);
  auto gpt = [&](const std::string& out, const std::string& decay, const std::string& steps) {
    return std::vector<std::string>{"train",
                                    std::string(LTRAIN_SOURCE_DIR) + "/configs/gpt_char.yaml",
                                    "data.path=" + (dir / "t.txt"),
                                    "model.n_layer=1",
                                    "model.n_embd=16",
                                    "model.n_head=2",
                                    "model.block_size=8",
                                    "train.max_steps=" + steps,
                                    "train.checkpoint_every=2",
                                    "train.threads=1",
                                    "optimizer.decay=" + decay,
                                    "--output-dir",
                                    out};
  };
  // One group: what every gpt checkpoint written before optimizer.decay existed holds.
  REQUIRE(runLtrain(gpt(dir / "old", "all", "2")).exit_code == 0);
  const std::string ckpt = dir / "old/checkpoints/step-00000002.pt";
  auto a = gpt(dir / "new", "matrices", "4");
  a.push_back("train.resume=" + ckpt);
  auto r = runLtrain(a);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("checkpoint '" + ckpt +
                                              "' holds an optimizer with other parameter groups "
                                              "than this run's (2 here)"));
  auto b = gpt(dir / "again", "all", "4");
  b.push_back("train.resume=" + ckpt);
  auto ok = runLtrain(b);
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}
