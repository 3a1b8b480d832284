// train.activation_checkpointing end to end on real processes: a GPT with dropout trains to the
// plain run's weights with every block recomputed, under DDP, under ZeRO-1 and in a two-stage
// pipeline, and the log says how many runs are recomputed.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "support/process.h"
#include "support/results.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

TEST_CASE("activation checkpointing trains to the plain weights: DDP, ZeRO-1, pipeline", "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(300));
  auto run = [&](const std::string& name, int procs, std::vector<std::string> extra) {
    std::vector<std::string> a{"train",
                               "--nproc-per-node",
                               std::to_string(procs),
                               dir / "c.yaml",
                               "data.dataset=text",
                               "data.path=" + (dir / "t.txt"),
                               "data.batch_size=4",
                               "model.name=gpt",
                               "model.n_layer=3",
                               "model.n_head=2",
                               "model.n_embd=32",
                               "model.block_size=16",
                               "model.dropout=0.1",
                               "optimizer.name=adamw",
                               "optimizer.lr=0.003",
                               "train.clip_grad_norm=0.5",
                               "train.max_steps=15",
                               "train.threads=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {"--output-dir", dir / name});
    auto r = runLtrain(a);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto weights = [&](const std::string& name) { return dir / (name + "/model.safetensors"); };
  run("ddp", 2, {});
  auto ckpt = run("ddp-ckpt", 2, {"train.activation_checkpointing=blocks"});
  CHECK_THAT(ckpt.out + ckpt.err,
             Contains("activation checkpointing: 3 recomputed run(s) of up to 1"));
  double d = ltrain::test::maxWeightDiff(weights("ddp"), weights("ddp-ckpt"));
  INFO("DDP: max |plain - checkpointed| = " << d);
  CHECK(d < 1e-6);
  run("zero", 2, {"dist.zero=1"});
  run("zero-ckpt", 2, {"dist.zero=1", "train.activation_checkpointing=every:2"});
  d = ltrain::test::maxWeightDiff(weights("zero"), weights("zero-ckpt"));
  INFO("ZeRO-1: max |plain - checkpointed| = " << d);
  CHECK(d < 1e-6);
  const std::vector<std::string> pipe{"model.placement=pipeline", "model.micro_batches=2"};
  run("pipe", 1, pipe);
  auto with = pipe;
  with.push_back("train.activation_checkpointing=blocks");
  run("pipe-ckpt", 1, with);
  d = ltrain::test::maxWeightDiff(weights("pipe"), weights("pipe-ckpt"));
  INFO("pipeline: max |plain - checkpointed| = " << d);
  CHECK(d < 1e-6);
}
