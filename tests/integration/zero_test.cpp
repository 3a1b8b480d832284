// dist.zero: 1 and 2 (ZeRO-1, ZeRO-2) against plain DDP on real processes: the same weights
// within 1e-5 after 20 steps (AdamW with clipping and decay on matrices only on a GPT, with grad
// accumulation under ZeRO-2; SGD with momentum on an MLP over three ranks, whose buckets do not
// split evenly), about 1/world of the optimizer state per rank (and of the gradients under
// ZeRO-2), and checkpoints that resume across zero stages.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {

// 20 steps of a small GPT on `dir`/t.txt with `dir`/c.yaml.
std::vector<std::string> gpt(const TempDir& dir, const std::string& out, int procs,
                             std::vector<std::string> extra) {
  std::vector<std::string> a{"train",
                             "--nproc-per-node",
                             std::to_string(procs),
                             dir / "c.yaml",
                             "data.dataset=text",
                             "data.path=" + (dir / "t.txt"),
                             "data.batch_size=4",
                             "model.name=gpt",
                             "model.n_layer=2",
                             "model.n_head=2",
                             "model.n_embd=32",
                             "model.block_size=32",
                             "optimizer.name=adamw",
                             "optimizer.lr=0.003",
                             "optimizer.weight_decay=0.1",
                             "train.clip_grad_norm=0.5",
                             "train.max_steps=20",
                             "train.log_every=5",
                             "train.threads=1",
                             "--output-dir",
                             out};
  a.insert(a.end() - 2, extra.begin(), extra.end());
  return a;
}

double summaryValue(const std::string& run, const char* key) {
  return ltrain::test::readJson(run + "/summary.json")[key].get<double>();
}

}  // namespace

TEST_CASE("dist.zero=1 trains a GPT to plain DDP's weights with half the optimizer state",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, {"dist.zero=0"}));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  auto zero = runLtrain(gpt(dir, dir / "zero", 2, {"dist.zero=1"}));
  INFO(zero.out << zero.err);
  REQUIRE(zero.exit_code == 0);
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "zero/model.safetensors");
  INFO("max |ddp - zero| = " << diff);
  CHECK(diff < 1e-5);
  const double ddp_mb = summaryValue(dir / "ddp", "optimizer_state_mb");
  const double zero_mb = summaryValue(dir / "zero", "optimizer_state_mb");
  INFO("optimizer state per rank: ddp " << ddp_mb << " MiB, zero " << zero_mb << " MiB");
  CHECK(zero_mb == Approx(ddp_mb / 2).epsilon(0.02));  // padding adds a few elements
  // The untrained model would not be within 1e-5 of either: the runs did train.
  CHECK(summaryValue(dir / "zero", "train_loss") < 3.0);
  // GPT's weight decay is on matrices only (optimizer.decay's default): ZeRO's flat slices mix
  // matrices with biases and norms, and decaying them all would end elsewhere.
  auto all = runLtrain(gpt(dir, dir / "zero-all", 2, {"dist.zero=1", "optimizer.decay=all"}));
  INFO(all.out << all.err);
  REQUIRE(all.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors",
                                    dir / "zero-all/model.safetensors") > 1e-4);
}

TEST_CASE("dist.zero=1 resumes a killed run exactly, and checkpoints cross between zero stages",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  auto full = runLtrain(gpt(dir, dir / "full", 2, {"dist.zero=1"}));
  REQUIRE(full.exit_code == 0);
  // Killed after step 12; the launcher restarts from the step-10 checkpoint.
  auto a = gpt(dir, dir / "killed", 2, {"dist.zero=1", "train.checkpoint_every=10"});
  a.insert(a.begin() + 3, {"--max-restarts", "1"});
  auto killed = runLtrain(a, {{"LTRAIN_FAULT_KILL_AT_STEP", "12:1"}});
  INFO(killed.out << killed.err);
  REQUIRE(killed.exit_code == 0);
  CHECK_THAT(killed.out + killed.err, Contains("resuming from"));
  CHECK(ltrain::test::maxWeightDiff(dir / "full/model.safetensors",
                                    dir / "killed/model.safetensors") == 0.0);

  // The first 10 steps without ZeRO, the next 10 with it (and the other way round): the
  // optimizer state moves through the checkpoint whole. A constant learning rate keeps the
  // schedule independent of where the run stops.
  auto ref = runLtrain(gpt(dir, dir / "ref", 2, {"dist.zero=0", "scheduler.name=constant"}));
  REQUIRE(ref.exit_code == 0);
  for (auto [first, second] :
       {std::pair{"0", "1"}, std::pair{"1", "0"}, std::pair{"2", "0"}, std::pair{"1", "2"}}) {
    const std::string run = dir / (std::string("cross") + first + second);
    auto p1 = runLtrain(
        gpt(dir, run, 2,
            {std::string("dist.zero=") + first, "scheduler.name=constant", "train.max_steps=10"}));
    REQUIRE(p1.exit_code == 0);
    // A finished run is not extended in place: the second part starts from its checkpoint.
    auto p2 = runLtrain(gpt(dir, run + "b", 2,
                            {std::string("dist.zero=") + second, "scheduler.name=constant",
                             "train.resume=" + run + "/checkpoints/step-00000010.pt"}));
    INFO(p2.out << p2.err);
    REQUIRE(p2.exit_code == 0);
    CHECK_THAT(p2.out + p2.err, Contains("resuming from"));
    CHECK(ltrain::test::maxWeightDiff(dir / "ref/model.safetensors", run + "b/model.safetensors") <
          1e-5);
  }
}

TEST_CASE("dist.zero=1 with SGD momentum over three ranks matches DDP", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  auto run = [&](const std::string& zero) {
    return runLtrain({"train", "--nproc-per-node", "3", dir / "c.yaml", "data.dataset=synthetic",
                      "data.synthetic_shape=[1,5,5]", "data.synthetic_train_samples=480",
                      "data.batch_size=8", "model.hidden=[7]", "optimizer.momentum=0.9",
                      "optimizer.nesterov=true", "optimizer.weight_decay=0.01",
                      "train.max_steps=20", "train.threads=1", "dist.zero=" + zero, "--output-dir",
                      dir / ("z" + zero)});
  };
  REQUIRE(run("0").exit_code == 0);
  auto z = run("1");
  INFO(z.out << z.err);
  REQUIRE(z.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors", dir / "z1/model.safetensors") <
        1e-5);
  const double ratio = summaryValue(dir / "z1", "optimizer_state_mb") /
                       summaryValue(dir / "z0", "optimizer_state_mb");
  CHECK(ratio == Approx(1.0 / 3).epsilon(0.05));
  // ZeRO-2 over the same three ranks: the same weights, a third of the gradients kept.
  auto z2 = run("2");
  INFO(z2.out << z2.err);
  REQUIRE(z2.exit_code == 0);
  CHECK(ltrain::test::maxWeightDiff(dir / "z0/model.safetensors", dir / "z2/model.safetensors") <
        1e-5);
  // DDP keeps each gradient once (.grad is a view of its bucket), ZeRO-2 a third of it.
  const double grads =
      summaryValue(dir / "z2", "gradient_mb") / summaryValue(dir / "z0", "gradient_mb");
  CHECK(grads == Approx(1.0 / 3).epsilon(0.1));
}

TEST_CASE("dist.zero=2 trains a GPT to plain DDP's weights holding 1/world of the gradients",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 3\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(400));
  // Grad accumulation too: the micro-steps before the last accumulate locally, as under DDP.
  auto ddp = runLtrain(gpt(dir, dir / "ddp", 2, {"dist.zero=0", "train.grad_accum=2"}));
  INFO(ddp.out << ddp.err);
  REQUIRE(ddp.exit_code == 0);
  // Small buckets, so that backward releases them one after another.
  auto z2 = runLtrain(
      gpt(dir, dir / "z2", 2, {"dist.zero=2", "train.grad_accum=2", "dist.bucket_cap_mb=0.01"}));
  INFO(z2.out << z2.err);
  REQUIRE(z2.exit_code == 0);
  CHECK_THAT(z2.out, Contains("ZeRO-2"));
  const double diff =
      ltrain::test::maxWeightDiff(dir / "ddp/model.safetensors", dir / "z2/model.safetensors");
  INFO("max |ddp - zero2| = " << diff);
  CHECK(diff < 1e-5);
  const double ddp_g = summaryValue(dir / "ddp", "gradient_mb");
  const double z2_g = summaryValue(dir / "z2", "gradient_mb");
  INFO("gradients per rank: ddp " << ddp_g << " MiB, zero-2 " << z2_g << " MiB");
  CHECK(z2_g == Approx(ddp_g / 2).epsilon(0.05));  // DDP's .grad are views of its buckets
  CHECK(summaryValue(dir / "z2", "optimizer_state_mb") ==
        Approx(summaryValue(dir / "ddp", "optimizer_state_mb") / 2).epsilon(0.02));
}

TEST_CASE("dist.zero=1 refuses the options it does not combine with, by name") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  for (auto [opt, says] :
       {std::pair{"train.precision=fp16", "train.precision fp16"},
        std::pair{"dist.grad_compression=bf16", "dist.grad_compression"},
        std::pair{"dist.find_unused_parameters=true", "dist.find_unused_parameters"}}) {
    auto r = runLtrain({"train", dir / "c.yaml", "data.dataset=synthetic", "dist.zero=1", opt,
                        "--output-dir", dir / "r"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(std::string("dist.zero: 1 does not combine with ") + says));
  }
}
