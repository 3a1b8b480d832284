// Signals at the edges of a run: SIGHUP to the launcher (a closed terminal) checkpoints as
// SIGTERM does, and a stop request while the job is still starting ends it at once,
// "interrupted", rather than after a rendezvous timeout or as a failure.
#include <signal.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "ltrain/checkpoint/checkpoint.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;

TEST_CASE("SIGHUP to the launcher stops the workers as SIGTERM does: a checkpoint first",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  std::vector<std::string> argv{LTRAIN_BINARY};
  for (const auto& a : ltrain::test::syntheticRun(
           dir / "c.yaml", dir / "run",
           {"--nproc-per-node", "2", "data.synthetic_train_samples=64000", "data.batch_size=16",
            "train.log_every=1", "train.checkpoint_every=100000"}))
    argv.push_back(a);
  ltrain::test::BackgroundProcess job(argv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(dir / "run/metrics.jsonl") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  job.signal(SIGHUP);
  auto r = job.wait();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 128 + SIGHUP);
  CHECK_THAT(r.out + r.err, Contains("stopped by SIGTERM after step"));
  CHECK(!ltrain::checkpoint::checkpointsNewestFirst(dir / "run/checkpoints").empty());
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["status"] == "interrupted");
}

TEST_CASE("SIGTERM while a job waits at its rendezvous ends it at once, interrupted", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "dist: {timeout_s: 120}\n");
  // Rank 0 of two, as torchrun would start it: rank 1 never comes.
  std::vector<std::string> argv{LTRAIN_BINARY};
  for (const auto& a : ltrain::test::syntheticRun(dir / "c.yaml", dir / "run")) argv.push_back(a);
  ltrain::test::BackgroundProcess rank0(
      argv, {{"RANK", "0"},
             {"WORLD_SIZE", "2"},
             {"LOCAL_RANK", "0"},
             {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(ltrain::test::freePort())}});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  rank0.signal(SIGTERM);
  auto r = rank0.wait();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 143);
  CHECK(secs < 5);  // not the 120 s of dist.timeout_s
  CHECK_THAT(r.out, Contains("stopped by SIGTERM while waiting for the other ranks at "
                             "'rendezvous', before the first step: nothing to resume"));
  CHECK(r.err.find("error") == std::string::npos);  // a stop, not a failure
}
