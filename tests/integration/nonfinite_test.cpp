// train.nonfinite: a step with inf/nan gradients stops the run naming the step and its batches, or
// is skipped and counted. With several processes every rank takes the same decision at the same
// step, whichever rank produced the nan.
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/run_files.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
std::vector<std::string> train(const std::string& cfg, const std::string& out, int procs,
                               const std::string& mode) {
  auto a = ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=320", "data.batch_size=16", "model.hidden=[32]",
       "train.epochs=1", "train.log_every=1", "train.nonfinite=" + mode});
  if (procs > 1) a.insert(a.begin() + 2, {"--nproc-per-node", std::to_string(procs)});
  return a;
}
}  // namespace

TEST_CASE("train.nonfinite=skip: every rank skips the same step, counted in the metrics",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 2\n");
  auto on1 = runLtrain(train(dir / "c.yaml", dir / "nan-on-1", 2, "skip"),
                       {{"LTRAIN_FAULT_NAN_AT_STEP", "4:1"}});
  INFO(on1.out << on1.err);
  REQUIRE(on1.exit_code == 0);
  auto on0 = runLtrain(train(dir / "c.yaml", dir / "nan-on-0", 2, "skip"),
                       {{"LTRAIN_FAULT_NAN_AT_STEP", "4:0"}});
  REQUIRE(on0.exit_code == 0);
  CHECK(ltrain::test::readJson(dir / "nan-on-1/summary.json")["skipped_steps"] == 1);
  const auto records = ltrain::test::metricRecords(dir / "nan-on-1/metrics.jsonl", "train");
  REQUIRE(records.size() >= 4);
  CHECK(records[2]["step"] == 3);
  CHECK(records[2]["loss"].is_number());
  CHECK(records[3]["step"] == 4);
  CHECK(records[3]["loss"].is_null());  // the skipped step's loss stays out: nan, written as null
  CHECK(records[3]["skipped_steps"] == 1);
  // Rank 0 saves the weights: had it not skipped when only rank 1 saw the nan, they would differ.
  CHECK(readText(dir / "nan-on-1/model.safetensors") ==
        readText(dir / "nan-on-0/model.safetensors"));
  auto clean = runLtrain(train(dir / "c.yaml", dir / "clean", 2, "skip"));
  REQUIRE(clean.exit_code == 0);
  CHECK(readText(dir / "clean/model.safetensors") != readText(dir / "nan-on-0/model.safetensors"));
}

TEST_CASE("train.nonfinite=stop names the step and the batches, on every rank", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 2\n");
  auto r = runLtrain(train(dir / "c.yaml", dir / "two", 2, "stop"),
                     {{"LTRAIN_FAULT_NAN_AT_STEP", "4:1"}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("gradients are not finite at step 4 (epoch 1, batches 3-3 of the "
                             "epoch; loss on rank"));
  CHECK(ltrain::test::readJson(dir / "two/summary.json")["status"] == "failed");
  // Both ranks stopped on their own at that step: their logs hold the same error.
  CHECK_THAT(readText(dir / "two/logs/rank_0.log"), Contains("not finite at step 4"));
  CHECK_THAT(readText(dir / "two/logs/rank_1.log"), Contains("not finite at step 4"));

  auto one =
      runLtrain(train(dir / "c.yaml", dir / "one", 1, "stop"), {{"LTRAIN_FAULT_NAN_AT_STEP", "7"}});
  CHECK(one.exit_code == 1);
  CHECK_THAT(one.err, Contains("ltrain: error: gradients are not finite at step 7 (epoch 1, "
                               "batches 6-6 of the epoch; loss on rank 0: nan)"));
  // The way out named: a lower rate or clipping first, skipping for a rare bad batch.
  CHECK_THAT(one.err, Contains("the run diverged; lower optimizer.lr (peak"));
  CHECK_THAT(one.err, Contains("clip the gradients (train.clip_grad_norm: 1.0)"));
}

TEST_CASE("a skipped step leaves batch norm's statistics as they were before it") {
  // NaN inputs at step 3: the forward pass would have put nan into the running statistics, and
  // every evaluation after it would be nan.
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "model: {name: cnn, channels: [4], fc: [8]}\n");
  auto args = ltrain::test::syntheticRun(dir / "c.yaml", dir / "run",
                                         {"train.nonfinite=skip", "train.epochs=2"});
  args.erase(std::find(args.begin(), args.end(), "model.hidden=[16]"));
  auto r = runLtrain(args, {{"LTRAIN_FAULT_NAN_INPUT_AT_STEP", "3"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto s = ltrain::test::readJson(dir / "run/summary.json");
  CHECK(s["skipped_steps"] == 1);
  // Evaluated with the running statistics: nan (written as null) had they kept the nan batch.
  CHECK(s["test_loss"].is_number());
}
