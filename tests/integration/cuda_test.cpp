// The CUDA paths, run by scripts/gpu_check.sh on a GPU machine: NCCL with one rank, DDP on CUDA,
// bf16 autocast training on the GPU. Without a CUDA device these say so and check nothing.
#include <torch/cuda.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;

namespace {
bool haveCuda() {
  if (torch::cuda::is_available()) return true;
  WARN("no CUDA device here: the CUDA checks run in scripts/gpu_check.sh on a GPU machine");
  return false;
}
}  // namespace

TEST_CASE("DDP on CUDA with NCCL, one rank", "[cuda]") {
  if (!haveCuda()) return;
  for (std::string mode : {"basic", "accum", "bf16", "overlap"}) {
    auto r = runLtrain(
        {"launch", "--nproc-per-node", "1", "--master-port", "0", "--", LTRAIN_DDP_WORKER, mode},
        {{"LTRAIN_TEST_DEVICE", "cuda"}});
    INFO(mode << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto res = ltrain::test::workerResults(r.out);
    CHECK(res[0]["device"] == "cuda:0");
    CHECK(res[0]["backend"] == "nccl");
    CHECK(std::stod(res[0]["max_diff"]) <= (mode == "bf16" ? 2e-3 : 1e-5));
    CHECK(std::stoi(res[0]["allreduce_calls"]) == std::stoi(res[0]["buckets"]));
  }
}

TEST_CASE("training on the GPU, fp32 and bf16 autocast", "[cuda]") {
  if (!haveCuda()) return;
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "c.yaml",
                          "model:\n  name: cnn\n  channels: [16, 32]\n  fc: [64]\n");
  for (std::string precision : {"fp32", "bf16"}) {
    auto r = runLtrain({"train", dir / "c.yaml", "data.dataset=synthetic",
                        "data.synthetic_train_samples=2048", "data.synthetic_test_samples=256",
                        "optimizer.lr=0.05", "train.epochs=2", "train.precision=" + precision,
                        "--output-dir", dir / precision});
    INFO(precision << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto s = ltrain::test::readJson(dir / (precision + "/summary.json"));
    CHECK(s["test_accuracy"].get<double>() > 0.5);
  }
}
