// LibTorch's CUDA libraries live in libltrain_cuda.so, loaded where a GPU driver is (or with
// LTRAIN_LOAD_CUDA=1): a CPU-only run does not pay their resident memory, a forced load still
// trains on the CPU, and a plugin that does not load stops a run that may use the GPU (auto,
// cuda) with the loader's reason, while train.device cpu goes on after a warning.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

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

TEST_CASE("a CUDA plugin that did not load stops train.device auto and cuda, cpu goes on",
          "[cuda_plugin]") {
  TempDir dir;
  // The executable alone, without libltrain_cuda.so beside it (or one directory up).
  std::filesystem::create_directories(dir.path() + "/bin/alone");
  const std::string exe = dir.path() + "/bin/alone/ltrain";
  std::filesystem::copy_file(LTRAIN_BINARY, exe);
  std::filesystem::permissions(exe, std::filesystem::perms::owner_all);
  // LTRAIN_LOAD_CUDA=1 stands for a machine with an NVIDIA driver: there, under auto (the
  // default) and cuda, the run refuses with the loader's reason instead of training on the CPU.
  for (const std::string device : {"auto", "cuda"}) {
    auto args = ltrain::test::syntheticRun(kConfig, dir.path() + "/" + device);
    args.insert(args.begin(), exe);
    args.push_back("train.device=" + device);
    auto r = runProcess(args, {{"LTRAIN_LOAD_CUDA", "1"}});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("train.device " + device +
                               ": the CUDA libraries (libltrain_cuda.so) did not load: "));
    CHECK_THAT(r.err, Contains("set train.device cpu (or LTRAIN_LOAD_CUDA=0)"));
    CHECK_FALSE(std::filesystem::exists(dir.path() + "/" + device + "/summary.json"));
  }
  // train.device cpu: the warning, and the run on the CPU.
  auto args = ltrain::test::syntheticRun(kConfig, dir.path() + "/cpu");
  args.insert(args.begin(), exe);
  args.push_back("train.device=cpu");
  auto r = runProcess(args, {{"LTRAIN_LOAD_CUDA", "1"}});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("the CUDA libraries did not load"));
  CHECK(std::filesystem::exists(dir.path() + "/cpu/summary.json"));
}

TEST_CASE(
    "libltrain_cuda.so needs only LibTorch's libraries and the system's, none by a build "
    "machine's path",
    "[cuda_plugin]") {
  // LibTorch opens NVRTC, cuDNN and the rest itself; a NEEDED entry for the CUDA toolkit's
  // libnvrtc (found through this machine's RUNPATH) made the plugin fail to load elsewhere.
  auto r = runProcess({"readelf", "-d", std::string(LTRAIN_BINARY_DIR) + "/libltrain_cuda.so"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  int needed = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto open = line.find("Shared library: [");
    if (open == std::string::npos) continue;
    const std::string lib = line.substr(open + 17, line.find(']', open) - open - 17);
    INFO(lib);
    ++needed;
    const bool torch = lib.rfind("libtorch", 0) == 0 || lib.rfind("libc10", 0) == 0;
    const bool system = lib == "libstdc++.so.6" || lib == "libgcc_s.so.1" || lib == "libc.so.6" ||
                        lib == "libm.so.6";
    CHECK((torch || system));
  }
  CHECK(needed >= 3);
  // And the plugin says what it is: `ltrain --version` with the load forced.
  auto v = runLtrain({"--version"}, {{"LTRAIN_LOAD_CUDA", "1"}});
  INFO(v.out << v.err);
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Contains("LibTorch 2."));
  CHECK_THAT(v.out, Contains("CUDA: libltrain_cuda.so loaded, NCCL 2."));
}
