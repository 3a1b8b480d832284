// dist.zero 3's sharded parameters in one process (a world of one over Gloo): the units a model's
// layers make, the parameters' memory present only while their unit computes (forward, and
// backward once it reaches the unit), and the same gradients and step as the plain model's.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/distributed/parallel_plan.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/sharded_parameters.h"
#include "ltrain/models/model.h"
#include "support/process.h"

using ltrain::config::FsdpUnit;
using ltrain::distributed::unitsOfLayers;

TEST_CASE("FSDP units: a layer each, or the model, and shared parameters join their layers") {
  auto a = torch::zeros({2}), b = torch::zeros({3}), c = torch::zeros({4});
  const std::vector<std::vector<torch::Tensor>> layers{{a, b}, {}, {c}, {a}};  // 3 uses 0's a
  CHECK(unitsOfLayers(layers, FsdpUnit::kBlock) == std::vector<int64_t>{0, -1, 1, 0});
  CHECK(unitsOfLayers(layers, FsdpUnit::kModel) == std::vector<int64_t>{0, -1, 0, 0});
  CHECK(unitsOfLayers({{a}, {b}, {c}}, FsdpUnit::kBlock) == std::vector<int64_t>{0, 1, 2});
}

namespace {

torch::nn::Sequential net() {
  torch::manual_seed(4);
  return torch::nn::Sequential(torch::nn::Linear(5, 6), torch::nn::Tanh(), torch::nn::Linear(6, 7),
                               torch::nn::Tanh(), torch::nn::Linear(7, 3));
}

bool allFreed(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params)
    if (p.storage().nbytes() != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("ZeRO-3 frees each unit's parameters outside its forward and backward, same step") {
  ltrain::distributed::Runtime rt;
  rt.master_port = ltrain::test::freePort();
  auto dc = ltrain::config::defaults().dist;
  dc.timeout_s = 30;
  dc.zero = 3;
  dc.fsdp_prefetch = GENERATE(false, true);
  auto comm = ltrain::distributed::ProcessGroup::connect(rt, dc, torch::kCPU);

  auto plain = net();
  ltrain::models::Classifier model(net());
  auto make = [](std::vector<torch::Tensor> p, std::vector<std::vector<ltrain::ElementRange>> = {})
      -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
  };
  // As the trainer spreads a model: dist.zero 3 over a process group picks ZeRO's plan.
  auto plan = ltrain::distributed::parallelize(model, dc, comm.get(), {make, 0, {}});
  REQUIRE(plan->summary().description.find("ZeRO-3 over 3 unit(s)") != std::string::npos);
  const auto params = model->parameters();
  CHECK(allFreed(params));
  const int64_t whole = 4 * (5 * 6 + 6 + 6 * 7 + 7 + 7 * 3 + 3);
  CHECK(plan->summary().parameter_bytes == whole);  // a world of one: the slices are the whole

  const auto x = torch::randn({4, 5});
  plan->prepare(ltrain::distributed::MicroStep::forward(true, true));
  auto loss = model->forward(x).square().sum();
  CHECK(allFreed(params));  // forward gathered each unit and freed it: the graph holds none
  loss.backward();
  CHECK(plan->finishGradients(torch::Tensor()).item<float>() == 0.f);
  CHECK(allFreed(params));
  CHECK(plan->summary().gathered_peak_bytes > 0);
  CHECK(plan->summary().gathered_peak_bytes < whole);  // never the whole model at once
  plain->forward(x).square().sum().backward();
  CHECK(std::abs(plan->gradNorm() - [&] {
          double sq = 0;
          for (auto& p : plain->parameters()) sq += p.grad().square().sum().item<double>();
          return std::sqrt(sq);
        }()) < 1e-6);
  plan->step({0.1, 0.0, torch::Tensor()});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : plain->parameters()) p -= 0.1 * p.grad();
  }
  // The model as a checkpoint sees it: whole, on the host, equal to the plain model's step.
  bool compared = false;
  plan->state().saveWholeOptimizer([&](torch::optim::Optimizer&) {
    const auto got = model->parameters(), want = plain->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("parameter " << i);
      CHECK(torch::allclose(got[i], want[i], 1e-6, 1e-7));
    }
    compared = true;
  });
  CHECK(compared);
  CHECK(allFreed(params));
  // The next forward gathers the updated slices: the same outputs as the plain model's.
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(model->forward(x), plain->forward(x), 1e-6, 1e-6));
}
