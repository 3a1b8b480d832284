// dist.strategy=dp rests on LibTorch's replicate/parallel_apply, which need every module to be
// Cloneable. Replicas on two CPU "devices" (what data_parallel does across GPUs, minus the CUDA
// scatter) must give the original model's outputs and, through the replicas' gradient edges, its
// gradients: for the GPT (tied head included), the ResNet, the CNN and the MLP.
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/compute/precision.h"
#include "ltrain/config/schema.h"
#include "ltrain/distributed/data_parallel.h"
#include "ltrain/models/model.h"

namespace {
struct Case {
  const char* name;
  std::vector<int64_t> shape;
  bool tokens;
};
}  // namespace

TEST_CASE("replicas of every model family give the original's outputs and gradients") {
  for (const Case& c : {Case{"gpt", {8}, true}, Case{"resnet", {3, 8, 8}, false},
                        Case{"cnn", {1, 8, 8}, false}, Case{"mlp", {1, 8, 8}, false}}) {
    INFO(c.name);
    auto cfg = ltrain::config::defaults();
    cfg.model.name = c.name;
    cfg.model.n_layer = 2, cfg.model.n_head = 2, cfg.model.n_embd = 16, cfg.model.block_size = 8;
    cfg.model.width = 4, cfg.model.channels = {4}, cfg.model.fc = {8}, cfg.model.hidden = {8};
    torch::manual_seed(1);
    auto original = ltrain::models::build(cfg.model, c.shape, 6);
    torch::manual_seed(1);
    auto reference = ltrain::models::build(cfg.model, c.shape, 6);
    original->eval(), reference->eval();  // batch norm: running statistics, the same everywhere
    std::vector<int64_t> batch{4};
    batch.insert(batch.end(), c.shape.begin(), c.shape.end());
    auto x = c.tokens ? torch::randint(6, batch, torch::kLong) : torch::randn(batch);

    auto replicas = torch::nn::parallel::replicate(original, {torch::kCPU, torch::kCPU});
    REQUIRE(replicas.size() == 2);
    auto names = [](const torch::nn::Module& m) {
      std::vector<std::string> out;
      for (const auto& p : m.named_parameters()) out.push_back(p.key());
      return out;
    };
    CHECK(names(*replicas[1]) == names(*original));
    auto halves = x.chunk(2, 0);
    auto outs = torch::nn::parallel::parallel_apply(replicas, {halves[0], halves[1]});
    auto out = torch::cat(outs, 0);
    auto expected = reference->forward(x);
    CHECK(torch::allclose(out, expected, 1e-5, 1e-6));
    out.pow(2).mean().backward();
    expected.pow(2).mean().backward();
    auto got = original->named_parameters(), want = reference->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(got[i].key());
      REQUIRE(got[i].value().grad().defined());
      CHECK(torch::allclose(got[i].value().grad(), want[i].value().grad(), 1e-4, 1e-6));
    }
  }
}

TEST_CASE(
    "dist.strategy dp replicas run under the caller's autocast and grad mode, and replica "
    "0's batch-norm statistics reach the model") {
  // Two CPU "devices": dataParallelForward runs replica 1 on a thread of its own, as it does for
  // the second GPU.
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "cnn";
  cfg.model.channels = {4}, cfg.model.fc = {8};
  torch::manual_seed(3);
  auto model = ltrain::models::build(cfg.model, {1, 8, 8}, 5);
  const std::vector<torch::Device> two{torch::kCPU, torch::kCPU};
  auto x = torch::randn({6, 1, 8, 8});
  {
    ltrain::compute::AutocastScope autocast(ltrain::config::Precision::kBf16, torch::kCPU);
    auto out = ltrain::distributed::dataParallelForward(model, x, two);
    // A replica in fp32 would make the concatenation fp32.
    CHECK(out.scalar_type() == torch::kBFloat16);
  }
  {
    torch::NoGradGuard no_grad;
    auto out = ltrain::distributed::dataParallelForward(model, x, two);
    CHECK(!out.requires_grad());
  }
  model->train();
  torch::Tensor running_mean;
  for (const auto& b : model->named_buffers())
    if (b.key().find("running_mean") != std::string::npos) running_mean = b.value();
  REQUIRE(running_mean.defined());
  const auto before = running_mean.clone();
  auto out = ltrain::distributed::dataParallelForward(model, x, two);
  CHECK(out.requires_grad());
  CHECK(!torch::equal(running_mean, before));  // replica 0's statistics were copied back
}
