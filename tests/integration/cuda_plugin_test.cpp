// LibTorch's CUDA libraries live in libltrain_cuda.so, loaded where a GPU driver is (or with
// LTRAIN_LOAD_CUDA=1): a CPU-only run does not pay their resident memory, a forced load still
// trains on the CPU, and a missing plugin is a warning, not a failure.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::readJson;
using ltrain::test::runLtrain;
using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {
const std::string kConfig = std::string(LTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml";
}

TEST_CASE("the CUDA libraries are loaded only where a GPU can be used", "[cuda_plugin]") {
  if (std::filesystem::exists("/dev/nvidiactl")) {
    WARN("skipped, not counted: this machine has an NVIDIA driver, so the plugin loads by default");
    return;
  }
  TempDir dir;
  auto plain = runLtrain(ltrain::test::syntheticRun(kConfig, dir.path() + "/plain"));
  auto forced = runLtrain(ltrain::test::syntheticRun(kConfig, dir.path() + "/forced"),
                          {{"LTRAIN_LOAD_CUDA", "1"}});
  INFO(plain.err << forced.err);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(forced.exit_code == 0);
  CHECK_THAT(forced.err, !Contains("did not load"));  // the plugin and its libraries resolved
  const double plain_mb = readJson(dir.path() + "/plain/summary.json")["peak_rss_mb"].get<double>();
  const double forced_mb =
      readJson(dir.path() + "/forced/summary.json")["peak_rss_mb"].get<double>();
  INFO("peak RSS " << plain_mb << " MiB plain, " << forced_mb << " MiB with CUDA loaded");
  // libtorch_cuda, cuBLAS(Lt), nvJitLink and the rest: about 360 MiB resident on this machine.
  CHECK(forced_mb - plain_mb > 200);
  CHECK(plain_mb < 250);
}

TEST_CASE("loading the plugin registers LibTorch's CUDA backend, GPU or not", "[cuda_plugin]") {
  // What a GPU machine relies on: the hooks and the device guard that libtorch_cuda registers at
  // load time reach the CPU library ltrain links. Checked here without a GPU.
  auto loaded = runProcess({LTRAIN_DDP_WORKER, "cuda_hooks"}, {{"LTRAIN_LOAD_CUDA", "1"}});
  auto skipped = runProcess({LTRAIN_DDP_WORKER, "cuda_hooks"}, {{"LTRAIN_LOAD_CUDA", "0"}});
  INFO(loaded.out << loaded.err << skipped.out << skipped.err);
  REQUIRE(loaded.exit_code == 0);
  REQUIRE(skipped.exit_code == 0);
  CHECK_THAT(loaded.out, Contains("cuda_hooks cudart=1 guard=1"));
  CHECK_THAT(skipped.out, Contains("cuda_hooks cudart=0 guard=0"));
}

TEST_CASE("a missing CUDA plugin is a warning and the run goes on on the CPU", "[cuda_plugin]") {
  TempDir dir;
  // The executable alone, without libltrain_cuda.so beside it (or one directory up).
  std::filesystem::create_directories(dir.path() + "/bin/alone");
  const std::string exe = dir.path() + "/bin/alone/ltrain";
  std::filesystem::copy_file(LTRAIN_BINARY, exe);
  std::filesystem::permissions(exe, std::filesystem::perms::owner_all);
  auto args = ltrain::test::syntheticRun(kConfig, dir.path() + "/run");
  args.insert(args.begin(), exe);
  auto r = runProcess(args, {{"LTRAIN_LOAD_CUDA", "1"}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("the CUDA libraries did not load"));
  CHECK_THAT(r.err, Contains("running without a GPU"));
  CHECK(std::filesystem::exists(dir.path() + "/run/summary.json"));

  // Asked for the GPU, the same run refuses with the loader's reason, not "check the driver".
  args = ltrain::test::syntheticRun(kConfig, dir.path() + "/cuda");
  args.insert(args.begin(), exe);
  args.push_back("train.device=cuda");
  auto cuda = runProcess(args, {{"LTRAIN_LOAD_CUDA", "1"}});
  INFO(cuda.out << cuda.err);
  CHECK(cuda.exit_code == 2);
  CHECK_THAT(cuda.err, Contains("train.device cuda: the CUDA libraries (libltrain_cuda.so) did "
                                "not load: "));
}
