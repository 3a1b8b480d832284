// DistributedDataParallel over Gloo on loopback, in real processes: gradients equal the average of
// every rank's own, buckets reduce during backward, and W processes with batch B end where one
// process with batch W*B ends.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <chrono>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"
#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
// `world` ddp_workers in MODE under `ltrain launch`; `secs`: how long the launch took.
ltrain::test::ProcessResult launchWorkers(int world, const std::string& mode,
                                          double* secs = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = runLtrain({"launch", "--nproc-per-node", std::to_string(world), "--master-port", "0",
                      "--", LTRAIN_DDP_WORKER, mode});
  if (secs) *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::map<int, std::map<std::string, std::string>> runWorkers(
    int world, const std::string& mode, ltrain::test::ProcessResult* raw = nullptr) {
  auto r = launchWorkers(world, mode);
  if (raw) *raw = r;
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto res = ltrain::test::workerResults(r.out);
  REQUIRE(res.size() == static_cast<size_t>(world));
  return res;
}
}  // namespace

TEST_CASE("DDP gradients are the average of every rank's gradients", "[dist]") {
  for (int world : {2, 3}) {
    for (std::string mode : {"basic", "accum", "unused", "bf16"}) {
      INFO("world " << world << " mode " << mode);
      auto res = runWorkers(world, mode);
      for (auto& [rank, kv] : res) {
        INFO("rank " << rank);
        CHECK(kv["broadcast_ok"] == "true");
        // bf16 carries 8 bits of mantissa over the wire.
        CHECK(std::stod(kv["max_diff"]) <= (mode == "bf16" ? 2e-3 : 1e-6));
        // No rank used it: no gradient at all (-1), as PyTorch leaves it None.
        if (mode == "unused") CHECK(std::stod(kv["unused_grad_norm"]) == -1.0);
      }
    }
  }
}

TEST_CASE("one allreduce per bucket, and the first starts before backward ends", "[dist]") {
  auto small = runWorkers(2, "basic");
  const int buckets = std::stoi(small[0]["buckets"]);
  CHECK(buckets >= 3);
  CHECK(std::stoi(small[0]["allreduce_calls"]) == buckets);
  // 24 MiB of gradients in 4 MiB buckets: reduction overlaps the rest of backward.
  auto big = runWorkers(2, "overlap");
  for (auto& [rank, kv] : big) {
    INFO("rank " << rank << " first launch " << kv["first_launch_s"] << " backward end "
                 << kv["backward_end_s"]);
    CHECK(std::stoi(kv["buckets"]) >= 5);
    CHECK(std::stod(kv["first_launch_s"]) >= 0);
    CHECK(std::stod(kv["first_launch_s"]) < std::stod(kv["backward_end_s"]));
  }
}

TEST_CASE("buckets are laid out again in the order gradients became ready in the first step",
          "[dist]") {
  // The layers run in the reverse of their registration order, so reverse registration order
  // (the first step's buckets) puts fc3 first although backward reaches it last; from the second
  // step on, the buckets follow backward: fc1's before fc2's before fc3's.
  auto res = runWorkers(2, "reversed");
  for (auto& [rank, kv] : res) {
    INFO("rank " << rank << " before " << kv["order_before"] << " after " << kv["order_after"]);
    CHECK(std::stod(kv["max_diff"]) <= 1e-6);  // both steps average as plain DDP
    const auto& before = kv["order_before"];
    const auto& after = kv["order_after"];
    CHECK(before.find("fc2") < before.find("fc1"));
    CHECK(after.find('|') != std::string::npos);  // more than one bucket
    CHECK(after.find("fc1") < after.find("fc2"));
    CHECK(after.find("fc2") < after.find("fc3"));
    CHECK(after == res[0]["order_after"]);  // rank 0's order, on every rank
  }
}

TEST_CASE("an unused parameter without find_unused_parameters is a clear error, not a hang",
          "[dist]") {
  double secs = 0;
  auto r = launchWorkers(2, "unused_error", &secs);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out + r.err, Contains("extra.weight"));
  CHECK_THAT(r.out + r.err, Contains("find_unused_parameters"));
  CHECK(secs < 20);
}

TEST_CASE(
    "ranks on one host all-reduce, reduce-scatter and all-gather through shared memory, "
    "with Gloo's results",
    "[dist]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    for (auto& [rank, kv] : runWorkers(world, "shm")) {
      INFO("rank " << rank);
      CHECK(kv["shm"] == "1");
      CHECK(std::stod(kv["max_diff"]) == 0.0);  // small integers: exact in every order
    }
  }
  // dist.shm_allreduce false: Gloo alone.
  for (auto& [rank, kv] : runWorkers(2, "shm_off")) {
    CHECK(kv["shm"] == "0");
    CHECK(std::stod(kv["max_diff"]) == 0.0);
  }
}

TEST_CASE("a rank that leaves during a shared-memory all-reduce is named at once, not waited for",
          "[dist]") {
  double secs = 0;
  auto r = launchWorkers(2, "shm_dead", &secs);
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.out + r.err, Contains("rank 1 (pid"));
  CHECK_THAT(r.out + r.err, Contains("exited during shared-memory all-reduce"));
  CHECK(secs < 20);  // the worker's dist.timeout_s is 30
}

TEST_CASE("ranks that all-reduce tensors of different sizes get an error, not stale sums",
          "[dist]") {
  auto r = launchWorkers(2, "shm_mismatch");
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.out + r.err,
             Contains("reduces 1001 elements of Float where this rank reduces 1000"));
  // One rank all-gathers where the other reduce-scatters: both say so, from the segment.
  r = launchWorkers(2, "shm_op_mismatch");
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.out + r.err,
             Contains("rank 1 issued reduce-scatter where this rank issued all-gather"));
  CHECK_THAT(r.out + r.err,
             Contains("rank 0 issued all-gather where this rank issued reduce-scatter"));
}

TEST_CASE("a segment name taken by a user's file in /dev/shm leaves the file alone", "[dist]") {
  // Rank 0 is given the name of a file it did not write: it cannot create the segment, every
  // rank goes without it, and the file is still there with its contents.
  for (auto& [rank, kv] : runWorkers(2, "shm_collide")) {
    INFO("rank " << rank);
    CHECK(kv["joined"] == "0");
    CHECK(kv["user_file_kept"] == "1");
    if (rank == 0) CHECK(kv["why_not"] == "create");
  }
}

namespace {
std::vector<torch::Tensor> finalWeights(const std::string& run) {
  auto cfg = ltrain::config::defaults();
  cfg.model.hidden = {32, 16};
  auto m = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  auto ckpt = ltrain::checkpoint::newestCheckpoint(run + "/checkpoints");
  REQUIRE(ckpt);
  ltrain::checkpoint::loadCheckpoint(*ckpt, *m, *opt, {});
  return m->parameters();
}
std::vector<std::string> trainArgs(const std::string& cfg, const std::string& out, int batch,
                                   int accum) {
  return ltrain::test::syntheticRun(
      cfg, out,
      {"data.synthetic_train_samples=960", "data.synthetic_test_samples=60",
       "data.batch_size=" + std::to_string(batch), "model.hidden=[32,16]", "optimizer.lr=0.05",
       "optimizer.momentum=0.9", "train.max_steps=20", "train.log_every=50",
       "train.grad_accum=" + std::to_string(accum)});
}
}  // namespace

TEST_CASE("W processes with batch B end with the weights of one process with batch W*B", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 7\n");
  for (int accum : {1, 2}) {
    for (int world : {2, 3}) {
      INFO("world " << world << " grad_accum " << accum);
      const int b = 8;
      auto one = runLtrain(
          trainArgs(dir / "c.yaml", dir / fmt::format("one{}{}", world, accum), world * b, accum));
      REQUIRE(one.exit_code == 0);
      auto many_args =
          trainArgs(dir / "c.yaml", dir / fmt::format("many{}{}", world, accum), b, accum);
      many_args.insert(many_args.begin() + 2, {"--nproc-per-node", std::to_string(world)});
      auto many = runLtrain(many_args);
      INFO(many.out << many.err);
      REQUIRE(many.exit_code == 0);
      auto a = finalWeights(dir / fmt::format("one{}{}", world, accum));
      auto w = finalWeights(dir / fmt::format("many{}{}", world, accum));
      double max_diff = 0;
      for (size_t i = 0; i < a.size(); ++i)
        max_diff = std::max(max_diff, (a[i] - w[i]).abs().max().item<double>());
      CHECK(max_diff <= 1e-5);
      // Not trivially equal: training moved the weights away from their seed-7 initial values.
      auto cfg = ltrain::config::defaults();
      cfg.model.hidden = {32, 16};
      torch::manual_seed(7);
      auto init = ltrain::models::build(cfg.model, {1, 6, 6}, 10);
      CHECK((init->parameters()[0] - a[0]).abs().max().item<double>() > 1e-3);
      CHECK(ltrain::test::readJson(
                dir / fmt::format("many{}{}/summary.json", world, accum))["world_size"] == world);
    }
  }
}
