// A rank that stops responding makes the others fail within dist.timeout_s with an error naming
// it, the launcher ends the job, and no process of the job is left behind.
#include <catch2/catch.hpp>

#include <filesystem>

#include <chrono>
#include <thread>

#include "ltrain/io/json.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;

namespace {

struct Outcome {
  ltrain::test::ProcessResult result;
  double seconds = 0;
  std::vector<int> groups;  // the workers' process groups, seen while they ran
  std::string summary;      // summary.json as the job left it
};

Outcome runHanging(const std::string& fault, const std::string& spec,
                   const std::vector<std::string>& extra = {}) {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 1\n");
  std::vector<std::string> argv{LTRAIN_BINARY};
  for (const auto& a : ltrain::test::syntheticRun(
           dir / "c.yaml", dir / "run",
           {"--nproc-per-node", "3", "--grace", "2", "data.synthetic_train_samples=960",
            "data.batch_size=16", "model.hidden=[32]", "train.log_every=50", "dist.timeout_s=8"}))
    argv.push_back(a);
  argv.insert(argv.end() - 2, extra.begin(), extra.end());
  const auto t0 = std::chrono::steady_clock::now();
  ltrain::test::BackgroundProcess job(argv, {{"LTRAIN_FAULT_" + fault + "_AT_STEP", spec}});
  Outcome o;
  while (o.groups.size() < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    o.groups = ltrain::test::childGroups(job.pid());
  }
  o.result = job.wait();
  if (std::filesystem::exists(dir / "run/summary.json"))
    o.summary = ltrain::test::readText(dir / "run/summary.json");
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

}  // namespace

TEST_CASE("a stopped rank (SIGSTOP) is named by the others and the job ends cleanly", "[dist]") {
  auto o = runHanging("STOP", "5:1");
  INFO(o.result.out << o.result.err);
  CHECK(o.result.exit_code == 1);
  CHECK_THAT(o.result.err, Contains("rank(s) 1 stopped responding: no heartbeat for"));
  CHECK_THAT(o.result.err, Contains("(dist.timeout_s=8)"));
  CHECK(o.seconds < 40);  // start-up, 8 s of timeout, 2 s of grace: nothing waits longer
  REQUIRE(o.groups.size() == 3);
  for (int g : o.groups) CHECK(!ltrain::test::groupAlive(g));
}

TEST_CASE("rank 0 failing to write a checkpoint fails every rank at once, not after dist.timeout_s",
          "[dist]") {
  auto o = runHanging("SAVE", "4", {"train.checkpoint_every=4"});
  INFO(o.result.out << o.result.err);
  CHECK(o.result.exit_code == 1);
  // Rank 0 says why; the others, which the launcher may report first, learned it from rank 0 at
  // the save, not from a collective that timed out.
  CHECK_THAT(o.result.out + o.result.err,
             Contains("[rank 0] ltrain: error: cannot write the checkpoint of step 4: No space"));
  CHECK_THAT(o.result.out + o.result.err, Contains("ltrain: error: rank 0 could not write"));
  CHECK_THAT(o.result.out + o.result.err, !Contains("stopped responding"));
  CHECK_THAT(o.result.out + o.result.err, !Contains("not communicating"));
  REQUIRE(o.groups.size() == 3);
  for (int g : o.groups) CHECK(!ltrain::test::groupAlive(g));
}

TEST_CASE("a rank stuck in an endless loop is named as alive but not communicating", "[dist]") {
  auto o = runHanging("HANG", "5:2");
  INFO(o.result.out << o.result.err);
  CHECK(o.result.exit_code == 1);
  CHECK_THAT(o.result.err, Contains("rank(s) 2 are alive but not communicating (rank 2 is "
                                    "computing at step 5)"));
  // Rank 0 waited and timed out: summary.json says the run failed, and why, not "running".
  REQUIRE(!o.summary.empty());
  const auto s = ltrain::io::Json::parse(o.summary);
  CHECK(s["status"] == "failed");
  CHECK_THAT(s["error"].get<std::string>(), Contains("alive but not communicating"));
  CHECK(o.seconds < 40);
  REQUIRE(o.groups.size() == 3);
  for (int g : o.groups) CHECK(!ltrain::test::groupAlive(g));
}

TEST_CASE("a rank stopped inside ZeRO-1's collectives is named as well, not taken for busy",
          "[dist]") {
  // ZeRO-1's reduce-scatter, finiteness vote and all-gather, and the batch-norm buffers'
  // broadcast before each forward: every wait counts as communication for the watchdog.
  auto o = runHanging("STOP", "5:1", {"dist.zero=1", "optimizer.name=adamw"});
  INFO(o.result.out << o.result.err);
  CHECK(o.result.exit_code == 1);
  CHECK_THAT(o.result.err, Contains("rank(s) 1 stopped responding: no heartbeat for"));
  CHECK(o.seconds < 40);
  for (int g : o.groups) CHECK(!ltrain::test::groupAlive(g));
}
