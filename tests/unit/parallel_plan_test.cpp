// A new way of spreading a model is one file and one row in the list of strategies: this file
// is such a strategy (a plan that counts what the trainer asks of it and hands the work to DDP's),
// put first in the list by one line, and a whole training run drives it through the parallel
// plan alone, nothing in train/ knowing of it.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "ltrain/config/load.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/train/trainer.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

namespace {

using namespace ltrain::distributed;

struct Calls {
  int prepare = 0, last_prepare = 0, finish = 0, step = 0, zero = 0, state = 0;
  std::vector<double> lrs;
  bool in_order = true;  // finishGradients only after a prepare, step only after a finish
};

class CountingPlan final : public ParallelPlan {
 public:
  CountingPlan(std::unique_ptr<ParallelPlan> inner, Calls& calls)
      : inner_(std::move(inner)), calls_(calls) {}
  void prepare(const MicroStep& m) override {
    ++calls_.prepare, calls_.last_prepare += m.last ? 1 : 0;
    prepared_ = true;
    inner_->prepare(m);
  }
  torch::Tensor finishGradients(const torch::Tensor& unscale) override {
    ++calls_.finish;
    if (!prepared_) calls_.in_order = false;
    prepared_ = false, finished_ = true;
    return inner_->finishGradients(unscale);
  }
  double gradNorm() override { return inner_->gradNorm(); }
  void step(const OptimizerStep& s) override {
    ++calls_.step;
    calls_.lrs.push_back(s.lr);
    if (!finished_) calls_.in_order = false;
    finished_ = false;
    inner_->step(s);
  }
  void zeroGradients() override { ++calls_.zero, inner_->zeroGradients(); }
  StepReport lastStep() const override { return inner_->lastStep(); }
  PlanSummary summary() const override {
    auto r = inner_->summary();
    r.description = "counted";
    return r;
  }
  PlanState& state() override { return ++calls_.state, inner_->state(); }

 private:
  std::unique_ptr<ParallelPlan> inner_;
  Calls& calls_;
  bool prepared_ = false, finished_ = false;
};

// Puts `s` first in the list for the life of the object.
struct StrategyFirst {
  explicit StrategyFirst(Strategy s) { strategies().insert(strategies().begin(), std::move(s)); }
  ~StrategyFirst() { strategies().erase(strategies().begin()); }
};

ltrain::train::Summary train(const std::string& out, const std::vector<std::string>& extra) {
  auto args = ltrain::test::syntheticRun(LTRAIN_SOURCE_DIR "/configs/quickstart.yaml", out, extra);
  // syntheticRun's command line without "train CONFIG" and "--output-dir OUT".
  const std::vector<std::string> overrides(args.begin() + 2, args.end() - 2);
  const auto lc =
      ltrain::config::loadConfig(LTRAIN_SOURCE_DIR "/configs/quickstart.yaml", overrides);
  return ltrain::train::runTraining(lc, {out, /*overwrite=*/true}, ltrain::distributed::Runtime{});
}

}  // namespace

TEST_CASE("a strategy added by one row of the list is what the trainer drives") {
  ltrain::test::TempDir dir;
  const std::vector<std::string> run{"train.epochs=1", "train.grad_accum=2",
                                     "scheduler.warmup_steps=0"};
  const auto plain = train(dir / "plain", run);

  Calls calls;
  StrategyFirst added({"counting", [](const PlanSetup&) { return true; },
                       [&calls](PlanSetup s) -> std::unique_ptr<ParallelPlan> {
                         return std::make_unique<CountingPlan>(makeDdpPlan(std::move(s)), calls);
                       }});
  const auto counted = train(dir / "counted", run);

  // 256 examples in batches of 32, two micro-batches a step: 4 steps of 2.
  CHECK(counted.steps == 4);
  CHECK(calls.prepare == 8);
  CHECK(calls.last_prepare == 4);  // the second micro-batch of each step completes it
  CHECK(calls.finish == 4);
  CHECK(calls.step == 4);
  CHECK(calls.zero == 0);  // no step skipped
  CHECK(calls.in_order);
  REQUIRE(calls.lrs.size() == 4);
  CHECK(calls.lrs.front() > calls.lrs.back());  // the cosine schedule's rates, step by step
  CHECK(calls.state >= 1);  // the end-of-run checkpoint went through the plan's state
  CHECK(std::filesystem::exists(dir / "counted/checkpoints/step-00000004.pt"));
  // The same arithmetic as the plain run's plan, which it hands the work to.
  CHECK(counted.train_loss == plain.train_loss);
  CHECK(counted.test_accuracy == plain.test_accuracy);
}
