// The command line as a user meets it: help, exit codes, one-line errors, run directories.
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/config/schema.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {
using ltrain::test::readJson;
// A fast run on the synthetic dataset.
std::vector<std::string> synthetic(const std::string& config, const std::string& out,
                                   std::vector<std::string> extra = {}) {
  return ltrain::test::syntheticRun(config, out, extra);
}
}  // namespace

TEST_CASE("help lists the subcommands and every config key with its default") {
  auto top = runLtrain({"--help"});
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.out, Contains("train"));
  CHECK_THAT(top.out, Contains("config"));
  auto train = runLtrain({"train", "--help"});
  CHECK(train.exit_code == 0);
  CHECK_THAT(train.out, Contains("--output-dir"));
  for (const auto& o : ltrain::config::schema()) CHECK_THAT(train.out, Contains(o.path));
  CHECK_THAT(train.out, Contains("(default 0.1)"));
}

TEST_CASE("bad usage exits 2 with one line") {
  for (auto args : std::vector<std::vector<std::string>>{
           {}, {"fly"}, {"train"}, {"train", "a.yaml", "--bogus"}}) {
    auto r = runLtrain(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(ltrain::test::countLines(r.err) == 1);
  }
}

TEST_CASE("config prints the resolved config, and --explain says where values came from") {
  const std::string cfg = std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml";
  auto r = runLtrain({"config", cfg, "optimizer.lr=0.01"});
  REQUIRE(r.exit_code == 0);
  auto y = YAML::Load(r.out);
  CHECK(y["optimizer"]["lr"].as<double>() == Approx(0.01));
  CHECK(y["model"]["hidden"].size() == 2);
  CHECK(y["data"]["path"].as<std::string>() == "");
  auto e = runLtrain({"config", cfg, "optimizer.lr=0.01", "--explain"});
  CHECK_THAT(e.out, Contains("# override optimizer.lr=0.01"));
  CHECK_THAT(e.out, Contains("quickstart.yaml:"));
  CHECK_THAT(e.out, Contains("# default"));
}

TEST_CASE("every config error exits 2 with one line naming the thing") {
  TempDir dir;
  struct Case {
    std::string yaml;
    std::vector<std::string> overrides;
    std::string expect;
  };
  std::vector<Case> cases{
      {"optimizer:\n  lrr: 0.1\n",
       {},
       "c.yaml:2: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"},
      {"optimizer:\n  lr: abc\n",
       {},
       "c.yaml:2: optimizer.lr: expected a finite number, got 'abc'"},
      {"optimizer:\n  lr: 0\n", {}, "optimizer.lr must be > 0, got 0"},
      {"data:\n  batch_size: 0\n", {}, "data.batch_size must be >= 1, got 0"},
      {"name: [x\n", {}, "invalid YAML"},
      {"", {"optimizer.lr"}, "expected KEY=VALUE"},
      {"", {"model.hiden=[1]"}, "did you mean 'model.hidden'?"},
      {"", {"train.epochs=two"}, "train.epochs: expected an integer, got 'two'"},
      {"",
       {"data.dataset=cifar"},
       "data.dataset must be one of "
       "fashion_mnist|mnist|cifar10|cifar100|csv|text|tokens|chat|preference|image_folder|"
       "image_list|"
       "synthetic"},
      {"", {"data.dataset=mnist"}, "data.path must name the directory"},
      {"", {"data.path=/nonexistent/dir"}, "data.path '/nonexistent/dir' does not exist"},
  };
  for (const auto& c : cases) {
    writeText(dir / "c.yaml", c.yaml);
    std::vector<std::string> args{"train", dir / "c.yaml"};
    args.insert(args.end(), c.overrides.begin(), c.overrides.end());
    args.insert(args.end(), {"--output-dir", dir / "run"});
    auto r = runLtrain(args);
    INFO(c.expect << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(ltrain::test::countLines(r.err) == 1);
    CHECK_THAT(r.err, Contains(c.expect));
    CHECK(!std::filesystem::exists(dir / "run"));  // nothing written for a bad config
  }
  std::filesystem::create_directories(dir / "empty");
  auto nodata = runLtrain(
      {"train", dir / "c.yaml", "data.path=" + (dir / "empty"), "--output-dir", dir / "run"});
  CHECK(nodata.exit_code == 2);
  CHECK_THAT(nodata.err, Contains("train-images-idx3-ubyte.gz' not found"));
  auto missing = runLtrain({"train", dir / "nope.yaml"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("config file '" + (dir / "nope.yaml") + "' not found"));
}

TEST_CASE(
    "a run writes config, metrics and summary, and a finished run is not overwritten by mistake") {
  TempDir dir;
  writeText(dir / "c.yaml", "name: t\n");
  const std::string run = dir / "run";
  auto r = runLtrain(synthetic(dir / "c.yaml", run, {"train.epochs=2"}));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("test_accuracy"));
  auto summary = readJson(run + "/summary.json");
  CHECK(summary["status"] == "completed");
  CHECK(summary["steps"] == 16);
  CHECK(summary["epochs"] == 2);
  CHECK(summary["world_size"] == 1);
  for (auto key : {"test_accuracy", "test_loss", "train_loss", "wall_s", "samples_per_s"})
    CHECK(summary[key].is_number());
  // The synthetic task is learnable: far better than chance (0.1) after two epochs.
  CHECK(summary["test_accuracy"].get<double>() > 0.5);
  auto cfg = YAML::LoadFile(run + "/config.yaml");
  CHECK(cfg["data"]["dataset"].as<std::string>() == "synthetic");
  CHECK_THAT(readText(run + "/overrides.txt"), Contains("data.dataset=synthetic"));
  auto metrics = readText(run + "/metrics.jsonl");
  CHECK(ltrain::test::countLines(metrics) ==
        8 + 2);  // train reports every 2 steps, one eval per epoch
  CHECK(ltrain::test::metricRecords(run + "/metrics.jsonl", "test").size() == 2);
  CHECK(std::filesystem::exists(run + "/checkpoints/step-00000016.pt"));

  const std::string before = readText(run + "/summary.json");
  auto again = runLtrain(synthetic(dir / "c.yaml", run, {"train.epochs=2"}));
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Contains("holds a finished run; pass --overwrite"));
  // ... and how to go on from it: its last checkpoint, resumed into a new directory.
  CHECK_THAT(again.err, Contains("train.resume=" + run + "/checkpoints/step-00000016.pt"));
  CHECK(readText(run + "/summary.json") == before);
  CHECK(readText(run + "/metrics.jsonl") == metrics);

  auto over = runLtrain(synthetic(dir / "c.yaml", run, {"train.epochs=1", "--overwrite"}));
  CHECK(over.exit_code == 0);
  CHECK(readJson(run + "/summary.json")["steps"] == 8);
  CHECK(!std::filesystem::exists(run + "/checkpoints/step-00000016.pt"));
}

TEST_CASE("an output directory that cannot be made is a usage error") {
  TempDir dir;
  writeText(dir / "c.yaml", "name: t\n");
  writeText(dir / "file", "x");
  auto r = runLtrain(synthetic(dir / "c.yaml", dir / "file/run"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("cannot create run directory"));
  auto f = runLtrain(synthetic(dir / "c.yaml", dir / "file"));
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("exists and is not a directory"));
  CHECK(readText(dir / "file") == "x");
}

TEST_CASE("the cnn trains end to end on synthetic images") {
  TempDir dir;
  writeText(dir / "c.yaml", "model:\n  name: cnn\n  channels: [4]\n  fc: [8]\n");
  auto args = synthetic(dir / "c.yaml", dir / "run", {"optimizer.lr=0.05"});
  args.erase(std::find(args.begin(), args.end(), "model.hidden=[16]"));
  auto r = runLtrain(args);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(readJson(dir / "run/summary.json")["status"] == "completed");
}

TEST_CASE("the quickstart trains on Fashion-MNIST to a useful accuracy", "[data]") {
  TempDir dir;
  auto r = runLtrain({"train", std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml",
                      "--output-dir", dir / "run"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto summary = readJson(dir / "run/summary.json");
  CHECK(summary["test_accuracy"].get<double>() >= 0.86);
  CHECK(summary["steps"] == 3 * 469);
}

TEST_CASE("bf16 and fp16 autocast train on the CPU, and fp16 reports its loss scale") {
  for (std::string precision : {"bf16", "fp16"}) {
    TempDir dir;
    writeText(dir / "c.yaml", "name: t\n");
    auto r = runLtrain(
        synthetic(dir / "c.yaml", dir / "run", {"train.epochs=2", "train.precision=" + precision}));
    INFO(precision << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    auto summary = readJson(dir / "run/summary.json");
    CHECK(summary["test_accuracy"].get<double>() > 0.5);
    const auto train = ltrain::test::metricRecords(dir / "run/metrics.jsonl", "train");
    REQUIRE(!train.empty());
    CHECK(train.back().contains("data_wait_share"));
    if (precision == "fp16") {
      CHECK(train.back()["loss_scale"] == 65536.0);
      CHECK(summary["skipped_steps"] == 0);
    }
  }
}

TEST_CASE("eval prints the test metrics of a checkpoint or a safetensors file") {
  TempDir dir;
  writeText(dir / "c.yaml", "name: t\n");
  auto train = synthetic(dir / "c.yaml", dir / "run");
  REQUIRE(runLtrain(train).exit_code == 0);
  const double acc = readJson(dir / "run/summary.json")["test_accuracy"].get<double>();
  // The same config and overrides describe the model; only the weights come from the file.
  std::vector<std::string> args{"eval", dir / "c.yaml"};
  args.insert(args.end(), train.begin() + 2,
              train.end() - 2);  // the overrides, without --output-dir
  for (std::string weights :
       {dir / "run/checkpoints/step-00000008.pt", dir / "run/model.safetensors"}) {
    auto a = args;
    a.insert(a.end(), {"--checkpoint", weights});
    auto r = runLtrain(a);
    INFO(weights << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains(fmt::format("test_accuracy {:.4f}", acc)));
    CHECK_THAT(r.out, Contains("examples 64"));
  }
  auto a = args;
  a.insert(a.end(), {"--checkpoint", dir / "nope.pt"});
  auto missing = runLtrain(a);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("--checkpoint '" + (dir / "nope.pt") + "' not found"));
  // --run, as generate and export take it: the run's config and final weights.
  auto by_run = runLtrain({"eval", "--run", dir / "run"});
  INFO(by_run.err);
  REQUIRE(by_run.exit_code == 0);
  CHECK_THAT(by_run.out, Contains(fmt::format("test_accuracy {:.4f}", acc)));
  auto neither = runLtrain({"eval", dir / "c.yaml"});
  CHECK(neither.exit_code == 2);
  CHECK_THAT(neither.err, Contains("expected --checkpoint PATH"));
}

TEST_CASE(
    "a user's files in a run directory survive --overwrite, which removes only what ltrain wrote") {
  TempDir dir;
  writeText(dir / "c.yaml", "name: t\n");
  const std::string run = dir / "run";
  REQUIRE(runLtrain(synthetic(dir / "c.yaml", run, {"train.epochs=2"})).exit_code == 0);
  CHECK(std::filesystem::exists(run + "/.ltrain"));
  // The user keeps notes beside the run, and a plot inside its checkpoints folder.
  writeText(run + "/notes.txt", "lr 0.1 looked fine\n");
  writeText(run + "/checkpoints/plot.png", "PNG");
  std::filesystem::create_directories(run + "/analysis");
  writeText(run + "/analysis/table.csv", "a,b\n");
  auto again = runLtrain(synthetic(dir / "c.yaml", run, {"train.epochs=1", "--overwrite"}));
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(readJson(run + "/summary.json")["steps"] == 8);
  CHECK(!std::filesystem::exists(run + "/checkpoints/step-00000016.pt"));  // the old run's
  CHECK(readText(run + "/notes.txt") == "lr 0.1 looked fine\n");
  CHECK(readText(run + "/checkpoints/plot.png") == "PNG");
  CHECK(readText(run + "/analysis/table.csv") == "a,b\n");
}

TEST_CASE("loader-speed times the config's batches and says how many it timed") {
  auto r = runLtrain({"loader-speed", std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml",
                      "data.dataset=synthetic", "data.synthetic_train_samples=640",
                      "data.batch_size=64", "--batches", "6"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = ltrain::io::parseJsonOrDiscard(r.out);
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["batches"].get<int>() == 5);  // the first batch, the threads' start, left out
  CHECK(j["examples"].get<int>() == 5 * 64);
  CHECK(j["examples_per_s"].get<double>() > 0);
  auto few = runLtrain({"loader-speed", std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml",
                        "data.dataset=synthetic", "data.synthetic_train_samples=64",
                        "data.batch_size=64"});
  CHECK(few.exit_code == 2);
  CHECK_THAT(few.err, Contains("fewer than 2 batches"));
}

TEST_CASE("train.max_steps is the run's length, the epochs repeating as needed") {
  // 256 examples in batches of 32: 8 steps an epoch.
  TempDir dir;
  writeText(dir / "c.yaml", "seed: 1\n");
  struct Case {
    std::vector<std::string> set;
    int64_t steps;
    std::string start;
  };
  for (const auto& c : std::vector<Case>{
           {{"train.max_steps=20"}, 20, "20 steps (train.max_steps: 3 epoch(s) of 8)"},
           {{"train.max_steps=20", "train.epochs=5"},
            20,
            "20 steps (train.max_steps: 3 epoch(s) of 8)"},
           {{"train.epochs=2"}, 16, "16 steps (2 epoch(s) of 8)"}}) {
    const std::string out = dir / ("run" + std::to_string(c.steps) + c.set.back());
    auto r = runLtrain(synthetic(dir / "c.yaml", out, c.set));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err + r.out, Contains(c.start));
    CHECK(ltrain::test::summaryValue(out, "steps") == c.steps);
  }
}
