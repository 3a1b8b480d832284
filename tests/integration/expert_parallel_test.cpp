// dist.expert_parallel on real processes over Gloo: a mixtral and a qwen3_moe trained with ep 2
// (two ranks, each holding half of every layer's experts) and dp 2 x ep 2 (four) reach the
// one-process run's losses and weights within 1e-5 (AdamW with decay, clipping, grad
// accumulation), with fewer parameter bytes per rank; so do ZeRO-1 and ZeRO-3 without it. Their
// sharded checkpoints resume on one process, and a one-process checkpoint under ep 2, as the
// uninterrupted run goes on; export, generate and eval read the run whole. A world the group does
// not divide fails before training.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/process.h"
#include "support/results.h"
#include "support/run_files.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::summaryValue;
using ltrain::test::TempDir;

namespace {

// `procs` processes training `model` on `dir`/t.txt for 12 steps, a loss logged every step, a
// checkpoint at step 6. Four experts of which each token takes two, every one of them wide
// enough that they hold most of the parameters.
std::vector<std::string> run(const TempDir& dir, const std::string& out, int procs,
                             const std::string& model, std::vector<std::string> extra) {
  std::vector<std::string> a{"train",
                             "--nproc-per-node",
                             std::to_string(procs),
                             dir / "c.yaml",
                             "data.dataset=text",
                             "data.path=" + (dir / "t.txt"),
                             "data.batch_size=4",
                             "model.name=" + model,
                             "model.n_layer=2",
                             "model.n_head=4",
                             "model.n_kv_head=2",
                             "model.n_embd=32",
                             "model.block_size=32",
                             "model.intermediate_size=64",
                             "model.num_experts=4",
                             "model.num_experts_per_tok=2",
                             "optimizer.name=adamw",
                             "optimizer.lr=0.001",
                             "optimizer.weight_decay=0.1",
                             "scheduler.name=constant",
                             "train.clip_grad_norm=0.5",
                             "train.grad_accum=2",
                             "train.max_steps=12",
                             "train.log_every=1",
                             "train.eval_every=6",
                             "train.checkpoint_every=6",
                             "train.keep_checkpoints=0",
                             "train.threads=1",
                             "--output-dir",
                             out};
  a.insert(a.end() - 2, extra.begin(), extra.end());
  return a;
}

void requireRan(const ltrain::test::ProcessResult& r) {
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

// Every logged step's loss within 1e-5 of the reference's, from `from` on.
void checkLosses(const std::string& ref, const std::string& got, int from = 1) {
  const auto a = ltrain::test::trainLosses(ref + "/metrics.jsonl");
  const auto b = ltrain::test::trainLosses(got + "/metrics.jsonl");
  for (const auto& [step, loss] : a) {
    if (step < from) continue;
    INFO("step " << step);
    REQUIRE(b.count(step));
    INFO(loss << " vs " << b.at(step));
    CHECK(std::abs(loss - b.at(step)) < 1e-5);
  }
}

double weightDiff(const std::string& a, const std::string& b) {
  return ltrain::test::maxWeightDiff(a + "/model.safetensors", b + "/model.safetensors");
}

}  // namespace

TEST_CASE("dist.expert_parallel 2 and dp 2 x ep 2 train mixtral and qwen3_moe as one process does",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(800));
  for (const std::string model : {"mixtral", "qwen3_moe"}) {
    DYNAMIC_SECTION(model) {
      const std::string one = dir / (model + "-one"), one8 = dir / (model + "-one8");
      const std::string ep = dir / (model + "-ep2"), mesh = dir / (model + "-dp2ep2");
      // Two ranks of batch 4 see what one process of batch 8 sees (DistributedSampler deals the
      // same 8 examples); their experts split two ways.
      requireRan(runLtrain(run(dir, one8, 1, model, {"data.batch_size=8"})));
      const auto e = runLtrain(run(dir, ep, 2, model, {"dist.expert_parallel=2"}));
      requireRan(e);
      CHECK_THAT(e.out + e.err, Contains("expert parallel 2 x data parallel 1"));
      checkLosses(one8, ep);
      CHECK(weightDiff(one8, ep) < 1e-5);
      // Four ranks of batch 2: two groups of two, each expert's gradient summed over the pair
      // holding it.
      requireRan(
          runLtrain(run(dir, mesh, 4, model, {"dist.expert_parallel=2", "data.batch_size=2"})));
      checkLosses(one8, mesh);
      CHECK(weightDiff(one8, mesh) < 1e-5);
      CHECK(summaryValue(ep, "test_loss") == Approx(summaryValue(one8, "test_loss")).epsilon(1e-6));
      // Without expert parallelism, ZeRO-1 and ZeRO-3 shard the experts with the rest (every
      // expert has a gradient every step, zeros where no token reached it).
      for (const std::string zero : {"1", "3"}) {
        const std::string z = dir / (model + "-zero" + zero);
        requireRan(runLtrain(run(dir, z, 2, model, {"dist.zero=" + zero})));
        checkLosses(one8, z);
        CHECK(weightDiff(one8, z) < 1e-5);
      }
      // It trained, and each rank holds its half of the experts and all of the rest.
      CHECK(summaryValue(ep, "train_loss") < 3.0);
      const double whole = summaryValue(one8, "parameter_mb");
      const double part = summaryValue(ep, "parameter_mb");
      INFO("parameters per rank: " << part << " MiB of " << whole);
      CHECK(part < 0.8 * whole);
      CHECK(summaryValue(mesh, "parameter_mb") == Approx(part));
      // The routers' loss and balance, reported.
      const auto records = ltrain::test::metricRecords(ep + "/metrics.jsonl", "train");
      REQUIRE(!records.empty());
      CHECK(records.back()["aux_loss"].get<double>() > 0);
      CHECK(records.back()["expert_load_max_over_mean"].get<double>() >= 1.0);

      // ep 2's checkpoint (sharded, the whole model) on one process of batch 8, and the
      // one-process checkpoint under ep 2: the uninterrupted runs' steps 7 to 12.
      const std::string back = dir / (model + "-ep2-to-one");
      requireRan(runLtrain(
          run(dir, back, 1, model,
              {"data.batch_size=8", "train.resume=" + ep + "/checkpoints/step-00000006.shards"})));
      checkLosses(one8, back, 7);
      CHECK(weightDiff(one8, back) < 1e-5);
      const std::string onto = dir / (model + "-one-to-ep2");
      requireRan(runLtrain(run(
          dir, onto, 2, model,
          {"dist.expert_parallel=2", "train.resume=" + one8 + "/checkpoints/step-00000006.pt"})));
      checkLosses(one8, onto, 7);
      CHECK(weightDiff(one8, onto) < 1e-5);

      // The run reads whole: export, generation and evaluation.
      const auto x = runLtrain({"export", "--run", ep, "--hf", dir / (model + "-hf")});
      INFO(x.err);
      CHECK(x.exit_code == 0);
      const auto g =
          runLtrain({"generate", "--run", ep, "--prompt", "the cat", "--max-new-tokens", "8"});
      INFO(g.err);
      CHECK(g.exit_code == 0);
      const auto v = runLtrain({"eval", "--run", ep});
      INFO(v.err);
      CHECK(v.exit_code == 0);
      CHECK_THAT(v.out, Contains("val_loss"));
    }
  }
}

TEST_CASE("dist.expert_parallel refuses a world its group does not divide, before training",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 4\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(100));
  const auto r = runLtrain(run(dir, dir / "out", 3, "mixtral", {"dist.expert_parallel=2"}));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("dist.expert_parallel 2 needs whole groups of 2 ranks, but 3 "
                             "process(es) were started"));
  CHECK(!std::filesystem::exists(dir / "out/model.safetensors"));
}
