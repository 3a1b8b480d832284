// Models: output shapes, PyTorch-style parameter names, and an optimizer step that moves weights.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/load.h"
#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"
#include "ltrain/optim/optimizer.h"

using Catch::Matchers::Contains;

TEST_CASE("mlp and cnn give [batch, classes] logits for image batches") {
  auto cfg = ltrain::config::defaults();
  for (std::string name : {"mlp", "cnn"}) {
    cfg.model.name = name;
    auto m = ltrain::models::build(cfg.model, {1, 28, 28}, 10);
    CHECK(m->forward(torch::randn({5, 1, 28, 28})).sizes() == std::vector<int64_t>{5, 10});
    auto small = ltrain::models::build(cfg.model, {3, 8, 8}, 4);
    CHECK(small->forward(torch::randn({2, 3, 8, 8})).sizes() == std::vector<int64_t>{2, 4});
  }
}

TEST_CASE("parameter names and counts match the equivalent PyTorch Sequential") {
  auto cfg = ltrain::config::defaults();
  cfg.model.hidden = {256, 128, 100};
  auto m = ltrain::models::build(cfg.model, {1, 28, 28}, 10);
  // nn.Sequential(Flatten, Linear(784,256), ReLU, Linear(256,128), ReLU, Linear(128,100), ReLU,
  // Linear(100,10))
  CHECK(ltrain::models::parameterCount(*m) ==
        784 * 256 + 256 + 256 * 128 + 128 + 128 * 100 + 100 + 100 * 10 + 10);
  auto names = m->named_parameters().keys();
  CHECK(names.front() == "layers.1.weight");
  CHECK(names.back() == "layers.7.bias");

  cfg.model.name = "cnn";
  cfg.model.channels = {8};
  cfg.model.fc = {16};
  auto c = ltrain::models::build(cfg.model, {1, 28, 28}, 10);
  // conv (no bias, batch norm follows), bn weight+bias, fc, classifier
  CHECK(ltrain::models::parameterCount(*c) == 8 * 9 + 16 + 8 * 14 * 14 * 16 + 16 + 16 * 10 + 10);
  CHECK(c->named_buffers().contains("layers.1.running_mean"));
}

TEST_CASE("a cnn with more pooling stages than the image allows is a usage error") {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "cnn";
  cfg.model.channels = {4, 4, 4, 4};
  CHECK_THROWS_WITH(ltrain::models::build(cfg.model, {1, 4, 4}, 3), Contains("pooled conv blocks"));
}

TEST_CASE("an optimizer step changes the weights, for every optimizer") {
  auto cfg = ltrain::config::defaults();
  using ltrain::config::OptimizerName;
  for (auto name : {OptimizerName::kSgd, OptimizerName::kAdam, OptimizerName::kAdamw}) {
    torch::manual_seed(0);
    auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
    cfg.optimizer.name = name;
    auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
    auto before = m->parameters()[0].clone();
    auto loss = torch::nn::functional::cross_entropy(m->forward(torch::randn({8, 1, 4, 4})),
                                                     torch::randint(3, {8}, torch::kLong));
    loss.backward();
    opt->step();
    INFO(ltrain::config::toString(name));
    CHECK(!torch::equal(before, m->parameters()[0]));
    ltrain::optim::setLearningRate(*opt, 0.123);
    CHECK(opt->param_groups()[0].options().get_lr() == Approx(0.123));
  }
}

TEST_CASE("optimizer.decay matrices decays weights of 2+ dimensions only, the default for LMs") {
  auto cfg = ltrain::config::defaults();
  cfg.optimizer.name = ltrain::config::OptimizerName::kAdamw;
  cfg.optimizer.weight_decay = 0.1;
  cfg.optimizer.decay = ltrain::config::Decay::kMatrices;
  cfg.model.hidden = {8};
  auto m = ltrain::models::build(cfg.model, {1, 4, 4}, 3);
  auto opt = ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters());
  REQUIRE(opt->param_groups().size() == 2);
  auto wd = [&](size_t g) {
    return static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[g].options())
        .weight_decay();
  };
  CHECK(wd(0) == 0.1);
  CHECK(wd(1) == 0.0);
  for (const auto& p : opt->param_groups()[0].params()) CHECK(p.dim() == 2);
  for (const auto& p : opt->param_groups()[1].params()) CHECK(p.dim() == 1);
  cfg.optimizer.decay = ltrain::config::Decay::kAll;
  CHECK(ltrain::optim::makeOptimizer(cfg.optimizer, m->parameters())->param_groups().size() == 1);
  // The default depends on the model: matrices for gpt and llama, all for the others.
  auto lm =
      ltrain::config::loadConfigText("data: {dataset: text}\nmodel: {name: llama}\n", "t", {});
  CHECK(lm.cfg.optimizer.decay == ltrain::config::Decay::kMatrices);
  CHECK(lm.sources.at("optimizer.decay") == "default (model llama)");
  auto mlp = ltrain::config::loadConfigText("model: {name: mlp}\n", "t", {});
  CHECK(mlp.cfg.optimizer.decay == ltrain::config::Decay::kAll);
  auto set = ltrain::config::loadConfigText(
      "data: {dataset: text}\nmodel: {name: gpt}\noptimizer: {decay: all}\n", "t", {});
  CHECK(set.cfg.optimizer.decay == ltrain::config::Decay::kAll);
}

// dist.zero 3 builds gpt and llama without parameter memory and makes each layer's values when
// the plan shards it: the values must be the whole build's, bit for bit, for the same seed, and
// the generator must end where the whole build leaves it (dropout draws come after).
TEST_CASE(
    "a deferred gpt, llama, qwen3 or mistral build makes the whole build's weights bit for bit") {
  auto cfg = ltrain::config::defaults();
  cfg.model.n_layer = 3;
  cfg.model.n_head = 2;
  cfg.model.n_embd = 16;
  cfg.model.block_size = 8;
  for (std::string name : {"gpt", "llama", "qwen3", "mistral"})
    for (bool tied : {true, false}) {
      INFO(name << (tied ? " tied" : " untied"));
      cfg.model.name = name;
      cfg.model.tie_weights = tied;
      if (name != "gpt") cfg.model.intermediate_size = 24;
      cfg.model.head_dim = name == "qwen3" ? 12 : 0;  // its per-head norms 12 wide
      cfg.model.sliding_window = name == "mistral" ? 4 : 0;
      torch::manual_seed(7);
      auto whole = ltrain::models::build(cfg.model, {8}, 11, true);
      const auto after_whole = torch::rand({4});
      torch::manual_seed(7);
      auto deferred = ltrain::models::build(cfg.model, {8}, 11, true, /*deferred=*/true);
      const auto after_deferred = torch::rand({4});
      CHECK(torch::equal(after_whole, after_deferred));
      REQUIRE(deferred->deferred);
      // No memory until the values are asked for, and the same names and shapes as the whole.
      const auto a = whole->named_parameters(), b = deferred->named_parameters();
      REQUIRE(a.keys() == b.keys());
      for (const auto& p : b) CHECK(p.value().storage().nbytes() == 0);
      // The layers asked for out of order, as a plan's units may be, with the generator moved.
      torch::manual_seed(123);
      torch::NoGradGuard no_grad;
      auto all = [](const torch::Tensor& p) { return std::pair<int64_t, int64_t>{0, p.numel()}; };
      for (size_t i = deferred->layers->size(); i-- > 0;) {
        auto& layer = *deferred->layers->ptr(i);
        for (auto& p : layer.parameters()) p.set_data(torch::empty(p.sizes(), p.options()));
        deferred->deferred->fill(i, layer, all);
      }
      for (size_t i = 0; i < a.size(); ++i) {
        INFO(a[i].key());
        CHECK(torch::equal(a[i].value(), b[i].value()));
      }
      // Nothing drawn by filling: the generator is where the caller left it.
      const auto next = torch::rand({4});
      torch::manual_seed(123);
      CHECK(torch::equal(next, torch::rand({4})));
    }
}
