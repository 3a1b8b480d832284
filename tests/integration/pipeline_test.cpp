// model.placement=pipeline: inside one process, stages of about equal parameter count and the
// GPipe schedule's outputs and gradients equal to the unsplit model's; end to end on the CPU with
// two stages, one process and two processes under DDP train to the unsplit model's weights
// (within 1e-5 after 20 steps; measured 4e-7), with GPipe's schedule and with 1F1B.
// SGD: Adam divides by the root of second moments that are tiny in the first steps, which
// magnifies the last-bit differences of micro-batch matmuls (2.4e-5 measured with Adam, lr 3e-3).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "support/results.h"
#include "support/text_corpus.h"

using Catch::Matchers::Contains;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;

namespace {
ltrain::models::Classifier gpt(int64_t layers) {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "gpt";
  cfg.model.n_layer = layers;
  cfg.model.n_head = 2;
  cfg.model.n_embd = 16;
  cfg.model.block_size = 8;
  torch::manual_seed(3);
  return ltrain::models::build(cfg.model, {8}, 13);
}

// A 3-block GPT on `dir`/t.txt for 20 SGD steps, in `placement` with `schedule`, on `procs`
// processes; `extra` overrides go last (and win).
std::vector<std::string> gptRun(const TempDir& dir, const std::string& out, int procs,
                                const std::string& placement, const std::string& schedule,
                                const std::vector<std::string>& extra) {
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
                             "model.pipeline_schedule=" + schedule};
  a.insert(a.end(), extra.begin(), extra.end());
  a.insert(a.end(), {"--output-dir", out});
  if (procs > 1) a.insert(a.begin() + 1, {"--nproc-per-node", std::to_string(procs)});
  return a;
}
}  // namespace

TEST_CASE("pipeline stages split the layers by parameter count") {
  auto m = gpt(4);  // embedding, 4 blocks, final norm, tied head: 7 layers
  ltrain::models::applyPipeline(*m, {torch::kCPU, torch::kCPU}, 4);
  // The embedding (13*16 + 8*16) is about a third of a block: two blocks and a bit per stage.
  CHECK(m->pipeline->summary() == "layers 0-2 on cpu, layers 3-6 on cpu");
  ltrain::models::applyPipeline(*m, {torch::kCPU, torch::kCPU, torch::kCPU}, 2);
  CHECK(m->pipeline->summary() == "layers 0-1 on cpu, layers 2-3 on cpu, layers 4-6 on cpu");
  CHECK_THROWS_WITH(
      ltrain::models::applyPipeline(*m, std::vector<torch::Device>(8, torch::kCPU), 2),
      Contains("the model has 7 layers to split, expected 2..7"));
}

TEST_CASE("the GPipe schedule gives the unsplit model's outputs and gradients") {
  auto whole = gpt(3), piped = gpt(3);  // same seed: same weights
  ltrain::models::applyPipeline(*piped, {torch::kCPU, torch::kCPU},
                                3);  // 3 micro-batches of a batch of 7 (3+3+1)
  auto x = torch::randint(13, {7, 8}, torch::kLong);
  auto y = torch::randint(13, {7, 8}, torch::kLong);
  auto loss = [&](ltrain::models::Classifier& m) {
    auto out = m->forward(x);
    return torch::nn::functional::cross_entropy(out.flatten(0, 1), y.flatten());
  };
  auto lw = loss(whole), lp = loss(piped);
  CHECK(lp.item<double>() == Approx(lw.item<double>()).epsilon(1e-6));
  lw.backward();
  lp.backward();
  auto pw = whole->named_parameters(), pp = piped->named_parameters();
  REQUIRE(pw.size() == pp.size());
  for (size_t i = 0; i < pw.size(); ++i) {
    INFO(pw[i].key());
    REQUIRE(pp[i].key() == pw[i].key());  // the same names as unsplit
    CHECK(torch::allclose(pp[i].value().grad(), pw[i].value().grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("the 1F1B order: warm-up forwards, one forward one backward, then the rest backward") {
  using ltrain::models::Pipeline;
  // 3 stages, 4 micro-batches; a forward of m is m, its backward -(m + 1).
  const auto order = Pipeline::oneFOneBOrder(3, 4);
  CHECK(order[0] == std::vector<int64_t>{0, 1, 2, -1, 3, -2, -3, -4});
  CHECK(order[1] == std::vector<int64_t>{0, 1, -1, 2, -2, 3, -3, -4});
  CHECK(order[2] == std::vector<int64_t>{0, -1, 1, -2, 2, -3, 3, -4});
  // At most stages - s micro-batches alive on stage s (GPipe: all of them).
  for (int64_t stages : {2, 3, 4})
    for (int64_t micro : {1, 3, 8}) {
      const auto o = Pipeline::oneFOneBOrder(stages, micro);
      for (int64_t s = 0; s < stages; ++s) {
        int64_t alive = 0, peak = 0, forwards = 0, backwards = 0;
        for (int64_t op : o[static_cast<size_t>(s)]) {
          alive += op >= 0 ? 1 : -1;
          peak = std::max(peak, alive);
          (op >= 0 ? forwards : backwards)++;
        }
        CHECK(forwards == micro);
        CHECK(backwards == micro);
        CHECK(peak <= std::min(stages - s, micro));
      }
    }
}

TEST_CASE("the 1F1B schedule gives the unsplit model's loss and gradients") {
  auto whole = gpt(4), piped = gpt(4);
  ltrain::models::applyPipeline(*piped, {torch::kCPU, torch::kCPU, torch::kCPU},
                                5);  // 5 micro-batches of 7 rows
  auto x = torch::randint(13, {7, 8}, torch::kLong);
  auto y = torch::randint(13, {7, 8}, torch::kLong);
  auto lw = torch::nn::functional::cross_entropy(whole->forward(x).flatten(0, 1), y.flatten());
  lw.backward();
  std::vector<size_t> armed;
  auto loss = piped->pipeline->step(
      *piped, x, y,
      [](const torch::Tensor& out, const torch::Tensor& t) {
        return torch::nn::functional::cross_entropy(
            out.flatten(0, 1), t.flatten(),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      },
      torch::ones({}), [&](size_t s) { armed.push_back(s); });
  CHECK(loss.item<double>() == Approx(lw.item<double>()).epsilon(1e-6));
  // Each stage's reduction is armed once, before its last backward, the last stage first.
  CHECK(armed == std::vector<size_t>{2, 1, 0});
  auto pw = whole->named_parameters(), pp = piped->named_parameters();
  REQUIRE(pw.size() == pp.size());
  for (size_t i = 0; i < pw.size(); ++i) {
    INFO(pw[i].key());
    CHECK(torch::allclose(pp[i].value().grad(), pw[i].value().grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("a two-stage pipeline trains to the unsplit model's weights, alone and under DDP",
          "[dist]") {
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(300));
  for (int procs : {1, 2}) {
    auto run = [&](const std::string& placement, const std::string& schedule = "gpipe") {
      const std::string out =
          dir / (placement + (schedule == "gpipe" ? "" : schedule) + std::to_string(procs));
      auto r = runLtrain(gptRun(dir, out, procs, placement, schedule, {}));
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

TEST_CASE("LoRA in a two-stage pipeline trains the unsplit model's adapters, alone and under DDP",
          "[dist]") {
  // The frozen base rides in the stages as it is; only the adapters get gradients, reduced per
  // stage under DDP. SGD at lr 0.05 for 12 steps: LoRA's product B A turns the last-bit
  // differences of micro-batch matmuls into 8e-6 by step 20 at this rate (2e-8 at step 10).
  TempDir dir;
  ltrain::test::writeText(dir / "c.yaml", "seed: 8\n");
  ltrain::test::writeText(dir / "t.txt", ltrain::test::textCorpus(300));
  for (int procs : {1, 2}) {
    auto run = [&](const std::string& placement, const std::string& schedule) {
      const std::string out = dir / (placement + schedule + std::to_string(procs));
      auto r = runLtrain(gptRun(dir, out, procs, placement, schedule,
                                {"finetune.method=lora", "lora.target_modules=all-linear",
                                 "lora.rank=4", "optimizer.lr=0.05", "train.max_steps=12"}));
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      return out + "/model.safetensors";
    };
    const auto single = run("single", "gpipe");
    for (const char* schedule : {"gpipe", "1f1b"}) {
      const double diff = ltrain::test::maxWeightDiff(single, run("pipeline", schedule));
      INFO(procs << " process(es), " << schedule << ": max |single - pipeline| = " << diff);
      CHECK(diff < 1e-5);
    }
  }
}
