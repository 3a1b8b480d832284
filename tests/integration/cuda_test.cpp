// The CUDA paths, run by scripts/gpu_check.sh on a GPU machine ("ltrain_tests [cuda]"). Each
// asserts what it names: NCCL really used, activations really bf16, the fp16 scaler really
// skipping on inf, batches really pinned, a killed dropout run resuming to the same bytes, and no
// step making the host wait. Without a CUDA device each says so (a warning) and checks nothing:
// these are not coverage on a CPU-only machine.
#include <torch/cuda.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>
#include <cstdlib>

#include "ltrain/compute/precision.h"
#include "ltrain/config/schema.h"
#include "ltrain/data/loader.h"
#include "ltrain/models/model.h"
#include "support/cuda_expect.h"
#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readJson;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
using ltrain::test::haveCuda;

// A small MLP with dropout on synthetic data, on the GPU.
std::vector<std::string> gpuRun(const std::string& cfg, const std::string& out,
                                std::vector<std::string> extra = {}) {
  std::vector<std::string> base{"data.synthetic_train_samples=1024",
                                "model.hidden=[64,32]",
                                "model.dropout=0.3",
                                "train.device=cuda",
                                "train.epochs=2",
                                "train.log_every=4",
                                "train.checkpoint_every=8"};
  base.insert(base.end(), extra.begin(), extra.end());
  return ltrain::test::syntheticRun(cfg, out, base);
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

TEST_CASE("a launched worker trains over NCCL, and no step makes the host wait", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "dist: {backend: nccl}\n");
  // LTRAIN_CUDA_SYNC_DEBUG=error: torch raises on any synchronising call in a step that does not
  // log, which ends the run with exit 1.
  for (std::string precision : {"fp32", "bf16", "fp16"}) {
    auto args = gpuRun(dir / "c.yaml", dir / precision,
                       {"train.precision=" + precision, "train.clip_grad_norm=1.0",
                        "optimizer.name=adamw", "--nproc-per-node", "1"});
    auto r = runLtrain(args, {{"LTRAIN_CUDA_SYNC_DEBUG", "error"}});
    INFO(precision << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("on nccl with"));
    CHECK(readJson(dir / (precision + "/summary.json"))["test_accuracy"].get<double>() > 0.5);
  }
}

TEST_CASE("bf16 autocast really computes in bf16 on the GPU", "[cuda]") {
  if (!haveCuda()) return;
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "cnn", cfg.model.channels = {8}, cfg.model.fc = {16};
  auto model = ltrain::models::build(cfg.model, {1, 8, 8}, 4);
  model->to(torch::kCUDA);
  auto x = torch::randn({4, 1, 8, 8}, torch::kCUDA);
  ltrain::compute::AutocastScope autocast(ltrain::config::Precision::kBf16, torch::kCUDA);
  CHECK(model->layers->ptr(0)->as<torch::nn::Conv2d>()->forward(x).scalar_type() ==
        torch::kBFloat16);
  CHECK(model->forward(x).scalar_type() == torch::kBFloat16);
  CHECK(model->parameters()[0].scalar_type() == torch::kFloat);  // weights stay fp32
}

TEST_CASE("the fp16 scaler skips a step with inf gradients and halves its scale", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "name: t\n");
  auto r =
      runLtrain(gpuRun(dir / "c.yaml", dir / "run", {"train.precision=fp16", "train.log_every=1"}),
                {{"LTRAIN_FAULT_NAN_AT_STEP", "3"}});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(readJson(dir / "run/summary.json")["skipped_steps"] == 1);
  const auto train = ltrain::test::metricRecords(dir / "run/metrics.jsonl", "train");
  REQUIRE(train.size() >= 3);
  CHECK(train[1]["loss_scale"] == 65536.0);
  CHECK(train[2]["loss_scale"] == 32768.0);
  CHECK(train[2]["loss"].is_null());
}

TEST_CASE("batches for the GPU are built in pinned memory", "[cuda]") {
  if (!haveCuda()) return;
  ltrain::data::Dataset ds;
  ds.inputs = torch::randint(255, {16, 1, 4, 4}, torch::kUInt8);
  ds.targets = torch::randint(3, {16}, torch::kLong);
  ds.num_classes = 3;
  std::vector<int64_t> idx{0, 3, 5, 7};
  auto b = ltrain::data::makeBatch(ds, idx.data(), 4, /*pin=*/true);
  CHECK(b.inputs.is_pinned());
  CHECK(b.targets.is_pinned());
}

TEST_CASE("a GPU run with dropout killed mid-epoch resumes to the same bytes", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 5\n");
  const std::map<std::string, std::string> det{{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}};
  REQUIRE(runLtrain(gpuRun(dir / "c.yaml", dir / "full"), det).exit_code == 0);
  auto kill_env = det;
  kill_env["LTRAIN_FAULT_KILL_AT_STEP"] = "21";
  REQUIRE(runLtrain(gpuRun(dir / "c.yaml", dir / "cut"), kill_env).exit_code == 128 + 9);
  auto resumed = runLtrain(gpuRun(dir / "c.yaml", dir / "cut"), det);
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.out, Contains("resuming from"));
  CHECK(ltrain::test::readText(dir / "full/model.safetensors") ==
        ltrain::test::readText(dir / "cut/model.safetensors"));
}

TEST_CASE("train.device cpu keeps a multi-process run on the CPU of a GPU machine", "[cuda]") {
  if (!haveCuda()) return;
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "train: {device: cpu}\n");
  auto r =
      runLtrain(ltrain::test::syntheticRun(dir / "c.yaml", dir / "run", {"--nproc-per-node", "2"}));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("2 process(es) of 1 thread(s) on gloo"));
}
