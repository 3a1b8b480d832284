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

TEST_CASE("the 1F1B order: warm-up forwards, one forward one backward, then the rest backward") {
  using ltrain::models::ClassifierImpl;
  // 3 stages, 4 micro-batches; a forward of m is m, its backward -(m + 1).
  const auto order = ClassifierImpl::oneFOneBOrder(3, 4);
  CHECK(order[0] == std::vector<int64_t>{0, 1, 2, -1, 3, -2, -3, -4});
  CHECK(order[1] == std::vector<int64_t>{0, 1, -1, 2, -2, 3, -3, -4});
  CHECK(order[2] == std::vector<int64_t>{0, -1, 1, -2, 2, -3, 3, -4});
  // At most stages - s micro-batches alive on stage s (GPipe: all of them).
  for (int64_t stages : {2, 3, 4})
    for (int64_t micro : {1, 3, 8}) {
      const auto o = ClassifierImpl::oneFOneBOrder(stages, micro);
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
  piped->placePipeline({torch::kCPU, torch::kCPU, torch::kCPU}, 5);  // 5 micro-batches of 7 rows
  auto x = torch::randint(13, {7, 8}, torch::kLong);
  auto y = torch::randint(13, {7, 8}, torch::kLong);
  auto lw = torch::nn::functional::cross_entropy(whole->forward(x).flatten(0, 1), y.flatten());
  lw.backward();
  std::vector<size_t> armed;
  auto loss = piped->pipelineStep(
      x, y,
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
