// DDP's plan in a world of one over Gloo (what a single launched worker with an explicit
// dist.backend runs): the bucket rebuild after the first step keeps that step's extra scalars
// (the stop vote), and the gradients stay in their buckets from step to step instead of being
// allocated anew, with the values plain autograd gives.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "support/process.h"

namespace {

struct OneRank {
  std::shared_ptr<ltrain::distributed::ProcessGroup> comm;
  ltrain::config::DistConfig dc = ltrain::config::defaults().dist;
  OneRank() {
    ltrain::distributed::Runtime rt;
    rt.master_port = ltrain::test::freePort();
    dc.timeout_s = 30;
    comm = ltrain::distributed::ProcessGroup::connect(rt, dc, torch::kCPU);
  }
};

std::unique_ptr<torch::optim::Optimizer> sgd(std::vector<torch::Tensor> p,
                                             std::vector<std::vector<ltrain::ElementRange>> = {}) {
  return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
}

}  // namespace

TEST_CASE(
    "DDP in a world of one: the first step's extra scalars survive the bucket rebuild, and "
    "gradients stay in their buckets") {
  OneRank one;
  torch::manual_seed(0);
  auto net =
      torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3));
  ltrain::distributed::PlanSetup s;
  s.model = net.ptr(), s.make_optimizer = sgd, s.pg = one.comm.get(), s.dist = one.dc;
  s.extras.count = 2;
  float vote = 1.f;
  s.extras.fill = [&](float* v) { v[0] = vote, v[1] = 2.f * vote; };
  auto plan = ltrain::distributed::planFor(std::move(s));
  REQUIRE(plan->summary().description.find("gradient buckets") != std::string::npos);
  std::vector<const void*> storage;
  for (int step = 1; step <= 3; ++step) {
    INFO("step " << step);
    vote = static_cast<float>(step);
    const auto x = torch::randn({5, 6}), y = torch::randint(3, {5});
    // What plain autograd makes of the same batch, before the step.
    auto expected = torch::autograd::grad(
        {torch::nn::functional::cross_entropy(net->forward(x), y)}, net->parameters());
    plan->prepare(ltrain::distributed::MicroStep::forward(/*first=*/true, /*last=*/true));
    // After the first step the gradients are zeroed where they are (not set to none), so that
    // backward adds straight into them.
    if (step > 1)
      for (const auto& p : net->parameters()) {
        REQUIRE(p.grad().defined());
        CHECK(p.grad().abs().sum().item<double>() == 0.0);
      }
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    CHECK(plan->finishGradients(torch::Tensor()).item<float>() == 0.f);
    // Step 1 ends with the buckets laid out again in the order the gradients came: its sums
    // (a stop vote in step 1) must be those of this step's buckets, not of the new empty ones.
    const auto extras = plan->lastStep().extras;
    REQUIRE(extras.numel() == 2);
    CHECK(extras[0].item<float>() == vote);
    CHECK(extras[1].item<float>() == 2.f * vote);
    const auto params = net->parameters();
    std::vector<const void*> now;
    for (size_t i = 0; i < params.size(); ++i) {
      REQUIRE(params[i].grad().defined());
      CHECK(torch::allclose(params[i].grad(), expected[i], 1e-6, 1e-7));
      now.push_back(params[i].grad().data_ptr());
    }
    // From step 2 on (the rebuilt buckets), backward accumulates into the same memory each step.
    if (step == 3) CHECK(now == storage);
    storage = now;
    plan->step({0.1, 0.0, torch::Tensor()});
  }
}

TEST_CASE(
    "one process: gradients are zeroed where they are between steps, and a parameter no backward "
    "reached is skipped by AdamW as after zero_grad(set_to_none=True)") {
  torch::manual_seed(0);
  torch::nn::Linear used(4, 3), branch(4, 3);
  auto net = std::make_shared<torch::nn::Module>();
  net->register_module("used", used), net->register_module("branch", branch);
  ltrain::distributed::PlanSetup s;
  s.model = net, s.dist = ltrain::config::defaults().dist;  // no process group: one process
  s.make_optimizer = [](std::vector<torch::Tensor> p,
                        std::vector<std::vector<ltrain::ElementRange>>)
      -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::AdamW>(p,
                                                 torch::optim::AdamWOptions(0.1).weight_decay(0.5));
  };
  auto plan = ltrain::distributed::planFor(std::move(s));
  const void* used_grad = nullptr;
  torch::Tensor branch_before;
  for (int step = 1; step <= 3; ++step) {
    INFO("step " << step);
    const auto x = torch::randn({5, 4});
    const bool takes_branch = step != 2;  // step 2 never reaches the branch
    plan->prepare(ltrain::distributed::MicroStep::forward(/*first=*/true, /*last=*/true));
    auto loss = used->forward(x).square().sum();
    if (takes_branch) loss = loss + branch->forward(x).square().sum();
    const auto expected = torch::autograd::grad({loss}, {used->weight}, {}, /*retain_graph=*/true);
    loss.backward();
    plan->finishGradients(torch::Tensor());
    CHECK(torch::allclose(used->weight.grad(), expected[0], 1e-6, 1e-7));
    // The same memory from step to step: no step allocates the gradients anew.
    if (step > 1) CHECK(used->weight.grad().data_ptr() == used_grad);
    used_grad = used->weight.grad().data_ptr();
    CHECK(branch->weight.grad().defined() == takes_branch);
    branch_before = branch->weight.detach().clone();
    plan->step({0.1, 0.0, torch::Tensor()});
    // Unreached, it is not stepped: neither weight decay nor AdamW's moments move it.
    CHECK(branch->weight.detach().equal(branch_before) == !takes_branch);
  }
}
