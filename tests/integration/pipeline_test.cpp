// model.placement=pipeline end to end, on the CPU with two stages: one process, and two processes
// under DDP, train to the unsplit model's weights (within 1e-5 after 20 steps; measured 4e-7),
// with GPipe's schedule and with 1F1B.
// SGD: Adam divides by the root of second moments that are tiny in the first steps, which
// magnifies the last-bit differences of micro-batch matmuls (2.4e-5 measured with Adam, lr 3e-3).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/results.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

TEST_CASE("a two-stage pipeline trains to the unsplit model's weights, alone and under DDP",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(300));
  for (int procs : {1, 2}) {
    auto run = [&](const std::string& placement, const std::string& schedule = "gpipe") {
      const std::string out =
          dir / (placement + (schedule == "gpipe" ? "" : schedule) + std::to_string(procs));
      std::vector<std::string> a{"train",
                                 dir / "c.yaml",
                                 "data.dataset=text",
                                 "data.path=" + (dir / "t.txt"),
                                 "data.batch_size=6",
                                 "model.name=gpt",
                                 "model.n_layer=3",
                                 "model.n_head=2",
                                 "model.n_embd=32",
                                 "model.block_size=16",
                                 "optimizer.name=sgd",
                                 "optimizer.lr=0.3",
                                 "train.max_steps=20",
                                 "train.threads=1",
                                 "model.placement=" + placement,
                                 "model.micro_batches=4",
                                 "model.pipeline_schedule=" + schedule,
                                 "--output-dir",
                                 out};
      if (procs > 1) a.insert(a.begin() + 1, {"--nproc-per-node", std::to_string(procs)});
      auto r = runLtrain(a);
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      return r;
    };
    run("single");
    auto piped = run("pipeline");
    CHECK_THAT(piped.out + piped.err,
               Contains("pipeline of 2 stages, 4 micro-batches a batch: layers 0-"));
    // Under DDP each stage's gradients go through a communicator of its own (one device each,
    // as NCCL needs).
    if (procs > 1) CHECK_THAT(piped.out, Contains("(2 communicators, one per stage)"));
    const double diff = ltrain::test::maxWeightDiff(
        dir / ("single" + std::to_string(procs) + "/model.safetensors"),
        dir / ("pipeline" + std::to_string(procs) + "/model.safetensors"));
    INFO(procs << " process(es): max |single - pipeline| = " << diff);
    CHECK(diff < 1e-5);
    // 1F1B: backward per stage and micro-batch, each stage's reduction started before its last.
    run("pipeline", "1f1b");
    const double diff_1f1b = ltrain::test::maxWeightDiff(
        dir / ("single" + std::to_string(procs) + "/model.safetensors"),
        dir / ("pipeline1f1b" + std::to_string(procs) + "/model.safetensors"));
    INFO(procs << " process(es): max |single - 1f1b| = " << diff_1f1b);
    CHECK(diff_1f1b < 1e-5);
  }
}
