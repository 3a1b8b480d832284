// Preemption as a cluster delivers it: SIGTERM or SIGINT to the launcher or to one worker. Every
// rank stops after the same step, rank 0 checkpoints it, the job exits 143/130, and the next launch
// resumes there and ends with the weights of a run that was never interrupted.
#include <signal.h>

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "ltrain/checkpoint/checkpoint.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {

std::vector<std::string> train(const std::string& cfg, const std::string& out, int procs,
                               int samples = 640) {
  auto a = ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=" + std::to_string(samples), "data.batch_size=16",
       "model.hidden=[32]", "model.dropout=0.2", "train.epochs=2", "train.log_every=1",
       "train.checkpoint_every=100"});
  if (procs > 1) a.insert(a.begin() + 2, {"--nproc-per-node", std::to_string(procs)});
  return a;
}

int newestStep(const std::string& run) {
  auto all = ltrain::checkpoint::checkpointsNewestFirst(run + "/checkpoints");
  if (all.empty()) return -1;
  auto name = std::filesystem::path(all.front()).filename().string();
  return std::stoi(name.substr(5, 8));
}

// The last train record's step in metrics.jsonl (0 when none yet).
int lastLoggedStep(const std::string& run) {
  std::error_code ec;
  if (!std::filesystem::exists(run + "/metrics.jsonl", ec)) return 0;
  std::istringstream in(readText(run + "/metrics.jsonl"));
  std::string line;
  int step = 0;
  while (std::getline(in, line))
    if (line.find("\"train\"") != std::string::npos && line.back() == '}')
      step = ltrain::io::Json::parse(line)["step"].get<int>();
  return step;
}

}  // namespace

TEST_CASE("SIGTERM to one worker: all ranks stop after the same step, checkpoint, exit 143",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  REQUIRE(runLtrain(train(dir / "c.yaml", dir / "full", 2)).exit_code == 0);

  // Rank 1 alone gets SIGTERM after step 5; the vote started with step 6 carries it to rank 0.
  auto a = train(dir / "c.yaml", dir / "cut", 2);
  a.insert(a.end() - 2, {"--max-restarts", "3"});  // a signal is not a failure to restart from
  auto r = runLtrain(a, {{"LTRAIN_FAULT_SIGNAL_AT_STEP", "5:1"}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 143);
  CHECK_THAT(r.err, Contains("not restarting"));
  CHECK_THAT(r.out, Contains("stopped by SIGTERM after step 6"));
  CHECK(newestStep(dir / "cut") == 6);
  CHECK(ltrain::test::readJson(dir / "cut/summary.json")["status"] == "interrupted");

  auto again = runLtrain(train(dir / "c.yaml", dir / "cut", 2));
  INFO(again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, Contains("resuming from"));
  CHECK(readText(dir / "cut/model.safetensors") == readText(dir / "full/model.safetensors"));
}

TEST_CASE("SIGTERM to the launcher mid-run: checkpoint, 143, and the relaunch finishes the run",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  const int samples = 64000;  // 4000 steps: long enough to be signalled mid-run
  REQUIRE(runLtrain(train(dir / "c.yaml", dir / "full", 2, samples)).exit_code == 0);
  auto argv = train(dir / "c.yaml", dir / "cut", 2, samples);
  argv.insert(argv.begin(), LTRAIN_BINARY);
  ltrain::test::BackgroundProcess job(argv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lastLoggedStep(dir / "cut") < 20 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  job.signal(SIGTERM);
  auto r = job.wait();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 143);
  const int stopped = newestStep(dir / "cut");
  CHECK(stopped >= 20);
  CHECK(stopped < 4000);
  CHECK(lastLoggedStep(dir / "cut") == stopped);  // the steps done are the steps saved
  // Every rank tells the same story: none, waiting for the stop's checkpoint, claims it stopped
  // before its first step.
  for (const char* log : {"cut/logs/rank_0.log", "cut/logs/rank_1.log"})
    CHECK_THAT(readText(dir / log), !Contains("nothing to resume"));
  CHECK_THAT(r.out + r.err, !Contains("nothing to resume"));

  auto again = runLtrain(train(dir / "c.yaml", dir / "cut", 2, samples));
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, Contains("resuming from " + (dir / "cut/checkpoints/")));
  CHECK(readText(dir / "cut/model.safetensors") == readText(dir / "full/model.safetensors"));
}

TEST_CASE("SIGINT to a single process exits 130, and train.on_signal=stop writes no checkpoint") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 6\n");
  // The fault hook sends SIGTERM; SIGINT comes from outside, as Ctrl-C would.
  auto a = train(dir / "c.yaml", dir / "stop", 1);
  a.push_back("train.on_signal=stop");
  auto stop = runLtrain(a, {{"LTRAIN_FAULT_SIGNAL_AT_STEP", "3"}});
  CHECK(stop.exit_code == 143);
  CHECK(newestStep(dir / "stop") == -1);
  CHECK_THAT(stop.out, Contains("no checkpoint written"));

  auto argv = train(dir / "c.yaml", dir / "int", 1, 320000);
  argv.insert(argv.begin(), LTRAIN_BINARY);
  ltrain::test::BackgroundProcess job(argv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lastLoggedStep(dir / "int") < 10 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  job.signal(SIGINT);
  auto r = job.wait();
  CHECK(r.exit_code == 130);
  CHECK(newestStep(dir / "int") >= 10);
}
