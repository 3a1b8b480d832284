// ZeroOptimizer's checkpoint state, in one process (a world of one over Gloo): the whole
// optimizer's per-parameter state goes into the slices and comes back unchanged, also when some
// parameters have none (a parameter no rank used in a run with dist.find_unused_parameters).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/dist/comm.h"
#include "ltrain/dist/ddp.h"
#include "ltrain/dist/zero_optimizer.h"
#include "support/process.h"

TEST_CASE("ZeRO-1 state moves into the slices and back, parameters without state included") {
  ltrain::dist::Runtime rt;
  rt.master_port = ltrain::test::freePort();
  auto dc = ltrain::config::defaults().dist;
  dc.timeout_s = 30;
  auto comm = ltrain::dist::Comm::connect(rt, dc, torch::kCPU);
  torch::manual_seed(0);
  auto net = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::Linear(4, 2));
  ltrain::dist::DdpOptions o;
  o.shard_gradients = true;
  ltrain::dist::DistributedDataParallel ddp(net.ptr(), comm->backend(), 1, o);
  auto make = [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.1));
  };
  // The whole optimizer after one step in which only the first layer had gradients.
  auto full = make(net->parameters());
  auto params = net->parameters();
  for (size_t i = 0; i < 2; ++i) params[i].mutable_grad() = torch::randn_like(params[i]);
  full->step();
  REQUIRE(full->state().size() == 2);

  ltrain::dist::ZeroOptimizer zero(ddp, comm->backend(), 0, 1, make, comm->timeout(), {});
  REQUIRE_NOTHROW(zero.loadStateFrom(*full));
  CHECK(zero.stateBytes() == 2 * 4 * (3 * 4 + 4 + 4 * 2 + 2));  // two moments, every element

  auto back = make(net->parameters());
  zero.gatherStateInto(*back);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    auto* got = dynamic_cast<torch::optim::AdamParamState*>(
        back->state().at(params[i].unsafeGetTensorImpl()).get());
    REQUIRE(got != nullptr);
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
