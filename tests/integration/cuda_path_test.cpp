// The CUDA path's faults that a CPU can show: a checkpoint written on a GPU evaluates and resumes
// on a machine without one (its tensors are read onto the CPU, then placed), and train.device cpu
// keeps a multi-process run on the CPU whatever the machine has.
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

TEST_CASE("a checkpoint written on a GPU evaluates and resumes on a CPU-only machine") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  auto train = ltrain::test::syntheticRun(dir / "c.yaml", dir / "run",
                                          {"optimizer.name=adamw", "train.epochs=1"});
  REQUIRE(runLtrain(train).exit_code == 0);
  const std::string script =
      std::string(LTRAIN_SOURCE_DIR) + "/tests/support/relocate_checkpoint.py";
  auto moved = ltrain::test::runProcess(
      {LTRAIN_PYTHON, script, dir / "run/checkpoints/step-00000008.pt", dir / "gpu.pt", "cuda:0"});
  INFO(moved.err);
  REQUIRE(moved.exit_code == 0);

  std::vector<std::string> eval{"eval", dir / "c.yaml"};
  eval.insert(eval.end(), train.begin() + 2, train.end() - 2);
  auto cpu_eval = eval, gpu_eval = eval;
  cpu_eval.insert(cpu_eval.end(), {"--checkpoint", dir / "run/checkpoints/step-00000008.pt"});
  gpu_eval.insert(gpu_eval.end(), {"--checkpoint", dir / "gpu.pt"});
  auto a = runLtrain(cpu_eval), b = runLtrain(gpu_eval, {{"CUDA_VISIBLE_DEVICES", ""}});
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out == b.out);

  // Resumed from it (model, AdamW moments and loop position), the run goes on as from the CPU's.
  auto resume = [&](const std::string& ckpt, const std::string& out) {
    auto args = ltrain::test::syntheticRun(
        dir / "c.yaml", dir / out,
        {"optimizer.name=adamw", "train.epochs=2", "train.resume=" + ckpt});
    return runLtrain(args, {{"CUDA_VISIBLE_DEVICES", ""}});
  };
  auto from_cpu = resume(dir / "run/checkpoints/step-00000008.pt", "from-cpu");
  auto from_gpu = resume(dir / "gpu.pt", "from-gpu");
  INFO(from_gpu.err);
  REQUIRE(from_gpu.exit_code == 0);
  REQUIRE(from_cpu.exit_code == 0);
  CHECK_THAT(from_gpu.out, Contains("resuming from"));
  CHECK(ltrain::test::readText(dir / "from-gpu/model.safetensors") ==
        ltrain::test::readText(dir / "from-cpu/model.safetensors"));
}

TEST_CASE("train.device cpu runs several processes on the CPU over Gloo", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "train: {device: cpu}\n");
  auto r =
      runLtrain(ltrain::test::syntheticRun(dir / "c.yaml", dir / "run", {"--nproc-per-node", "2"}));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("2 process(es) of 1 thread(s) on gloo"));
  CHECK(ltrain::test::readJson(dir / "run/summary.json")["world_size"] == 2);
}
