// ZeRO-1's checkpoint state, in one process (a world of one over Gloo): the whole optimizer's
// per-parameter state goes into the slices and comes back unchanged, also when some parameters
// have none (a parameter no rank used in a run with dist.find_unused_parameters).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/distributed/optimizer_state.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "support/process.h"

TEST_CASE("ZeRO-1 state moves into the slices and back, parameters without state included") {
  ltrain::distributed::Runtime rt;
  rt.master_port = ltrain::test::freePort();
  auto dc = ltrain::config::defaults().dist;
  dc.timeout_s = 30;
  dc.zero = 1;
  auto comm = ltrain::distributed::ProcessGroup::connect(rt, dc, torch::kCPU);
  torch::manual_seed(0);
  auto net = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::Linear(4, 2));
  auto make = [](std::vector<torch::Tensor> p, std::vector<std::vector<ltrain::ElementRange>> = {})
      -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.1));
  };
  // The whole optimizer after one step in which only the first layer had gradients.
  auto full = make(net->parameters());
  auto params = net->parameters();
  for (size_t i = 0; i < 2; ++i) params[i].mutable_grad() = torch::randn_like(params[i]);
  full->step();
  REQUIRE(full->state().size() == 2);

  ltrain::distributed::PlanSetup setup;
  setup.model = net.ptr(), setup.make_optimizer = make, setup.pg = comm.get(), setup.dist = dc;
  auto zero = ltrain::distributed::makeZeroPlan(setup);
  REQUIRE_NOTHROW(zero->state().loadWholeOptimizer(*full));
  CHECK(zero->summary().optimizer_state_bytes ==
        2 * 4 * (3 * 4 + 4 + 4 * 2 + 2));  // two moments, all

  std::unique_ptr<torch::optim::Optimizer> back;
  zero->state().saveWholeOptimizer([&](torch::optim::Optimizer& whole) {
    back = make(net->parameters());
    ltrain::distributed::copyStateNextToParameters(whole, *back);
  });
  REQUIRE(back);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    auto* got = dynamic_cast<torch::optim::AdamParamState*>(
        back->state().at(params[i].unsafeGetTensorImpl()).get());
    REQUIRE(got != nullptr);
    CHECK(got->exp_avg().device().is_cpu());  // gathered into host memory
    if (i < 2) {
      auto* want = dynamic_cast<torch::optim::AdamParamState*>(
          full->state().at(params[i].unsafeGetTensorImpl()).get());
      CHECK(got->exp_avg().equal(want->exp_avg()));
      CHECK(got->exp_avg_sq().equal(want->exp_avg_sq()));
      CHECK(got->step() == 1);
    } else {
      CHECK(got->exp_avg().abs().sum().item<double>() == 0.0);  // started from zero moments
    }
  }
}

TEST_CASE("optimizer state follows its parameters to their device") {
  // A checkpoint's state is read onto the CPU; the parameters may sit elsewhere (the meta device
  // stands in for a GPU here). The state must end up next to each parameter, as copies.
  std::vector<torch::Tensor> params{torch::empty({2, 3}, torch::kMeta).requires_grad_(),
                                    torch::empty({2}, torch::kMeta).requires_grad_()};
  torch::optim::AdamW loaded(params, 0.1), placed(params, 0.1);
  for (const auto& p : params) {
    ltrain::distributed::ParamState st;
    st.step = 3;
    st.tensors = {{"exp_avg", torch::ones(p.sizes())}, {"exp_avg_sq", torch::ones(p.sizes())}};
    ltrain::distributed::writeParamState(loaded, p, st);
  }
  ltrain::distributed::copyStateNextToParameters(loaded, placed);
  REQUIRE(placed.state().size() == 2);
  for (const auto& p : params) {
    auto* s = dynamic_cast<torch::optim::AdamWParamState*>(
        placed.state().at(p.unsafeGetTensorImpl()).get());
    REQUIRE(s != nullptr);
    CHECK(s->exp_avg().device().is_meta());
    CHECK(s->exp_avg_sq().device().is_meta());
    CHECK(s->exp_avg().sizes() == p.sizes());
    CHECK(s->step() == 3);
  }
}
