// model.placement=pipeline inside one process: stages of about equal parameter count, and the
// GPipe schedule's outputs and gradients equal to the unsplit model's.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"

using Catch::Matchers::Contains;

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
}  // namespace

TEST_CASE("pipeline stages split the layers by parameter count") {
  auto m = gpt(4);  // embedding, 4 blocks, final norm, tied head: 7 layers
  m->placePipeline({torch::kCPU, torch::kCPU}, 4);
  // The embedding (13*16 + 8*16) is about a third of a block: two blocks and a bit per stage.
  CHECK(m->pipelineSummary() == "layers 0-2 on cpu, layers 3-6 on cpu");
  m->placePipeline({torch::kCPU, torch::kCPU, torch::kCPU}, 2);
  CHECK(m->pipelineSummary() == "layers 0-1 on cpu, layers 2-3 on cpu, layers 4-6 on cpu");
  CHECK_THROWS_WITH(m->placePipeline(std::vector<torch::Device>(8, torch::kCPU), 2),
                    Contains("the model has 7 layers to split, expected 2..7"));
}

TEST_CASE("the GPipe schedule gives the unsplit model's outputs and gradients") {
  auto whole = gpt(3), piped = gpt(3);                  // same seed: same weights
  piped->placePipeline({torch::kCPU, torch::kCPU}, 3);  // 3 micro-batches of a batch of 7 (3+3+1)
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
