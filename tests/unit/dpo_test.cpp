// finetune.method dpo's pieces (train/dpo.h): the sequence scores are the learned tokens' summed
// log-probabilities; the loss and rewards follow the DPO formula; and the reference is the model as
// Dpo found it, whatever training did to the parameters since, with the parameters left exactly as
// they were after the reference's forward. TRL's DPOTrainer checks the whole in
// parity/dpo_parity_test.cpp.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cmath>

#include "ltrain/config/schema.h"
#include "ltrain/data/chat_examples.h"
#include "ltrain/models/model.h"
#include "ltrain/train/dpo.h"

using ltrain::train::Dpo;
using ltrain::train::dpoLoss;
using ltrain::train::sequenceLogProbs;

TEST_CASE("a sequence's score is the sum of its learned tokens' log-probabilities") {
  torch::manual_seed(0);
  const auto logits = torch::randn({2, 4, 5});
  auto targets = torch::tensor({1, 2, 3, 4, 0, 1, 2, 3}, torch::kLong).view({2, 4});
  targets[0][0] = ltrain::data::kIgnoredTarget;
  targets[1][3] = ltrain::data::kIgnoredTarget;
  const auto lp = logits.log_softmax(-1);
  const double first =
      lp[0][1][2].item<double>() + lp[0][2][3].item<double>() + lp[0][3][4].item<double>();
  const double second =
      lp[1][0][0].item<double>() + lp[1][1][1].item<double>() + lp[1][2][2].item<double>();
  const auto s = sequenceLogProbs(logits, targets);
  CHECK(s[0].item<double>() == Approx(first).epsilon(1e-6));
  CHECK(s[1].item<double>() == Approx(second).epsilon(1e-6));
}

TEST_CASE("DPO's loss and rewards follow the formula, and equal to the reference it is log 2") {
  const auto c = torch::tensor({-10.0, -20.0}), r = torch::tensor({-12.0, -19.0});
  const auto same = dpoLoss(c, r, c, r, 0.1);
  CHECK(same.loss.item<double>() == Approx(std::log(2.0)));
  const auto rc = torch::tensor({-11.0, -21.0}), rr = torch::tensor({-11.0, -18.0});
  const auto t = dpoLoss(c, r, rc, rr, 0.5);
  // Log-ratios: chosen +1, +1; rejected -1, -1: every pair ranked right, margin 0.5 * 2 each.
  const double expected = -std::log(1.0 / (1.0 + std::exp(-0.5 * 2.0)));
  CHECK(t.loss.item<double>() == Approx(expected));
  const auto m = ltrain::train::dpoMetrics({t.stats[0].item<double>(), t.stats[1].item<double>(),
                                            t.stats[2].item<double>(), t.stats[3].item<double>()});
  CHECK(m.at(0).first == "rewards/chosen");
  CHECK(m.at(0).second == Approx(0.5));
  CHECK(m.at(1).second == Approx(-0.5));
  CHECK(m.at(2).second == Approx(1.0));
  CHECK(m.at(3).second == Approx(1.0));
}

TEST_CASE("the reference is the model as DPO found it, and the parameters come back untouched") {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "llama";
  cfg.model.n_layer = 1, cfg.model.n_head = 2, cfg.model.n_embd = 16, cfg.model.block_size = 6;
  cfg.model.intermediate_size = 24, cfg.model.n_kv_head = 1;
  torch::manual_seed(1);
  auto model = ltrain::models::build(cfg.model, {6}, 13, /*tokens=*/true);
  const auto x = torch::randint(13, {3, 2, 6}, torch::kLong);
  auto y = torch::randint(13, {3, 2, 6}, torch::kLong);
  y.select(2, 0).fill_(ltrain::data::kIgnoredTarget);
  Dpo dpo(0.1, model);
  const ltrain::compute::Devices cpu;
  // Unchanged: the model is its own reference, every reward zero, the loss log 2.
  auto t = dpo.loss(x, y, cpu);
  CHECK(t.loss.item<double>() == Approx(std::log(2.0)));
  CHECK(t.stats[0].item<double>() == 0.0);
  // A step's worth of change: the rewards move, the reference does not, and every parameter holds
  // its trained value after the reference's forward.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(0.05 * torch::randn_like(p));
  }
  std::vector<torch::Tensor> trained;
  for (const auto& p : model->parameters()) trained.push_back(p.detach().clone());
  t = dpo.loss(x, y, cpu);
  CHECK(t.stats[0].item<double>() != 0.0);
  t.loss.backward();
  size_t i = 0;
  for (const auto& p : model->parameters()) {
    CHECK(torch::equal(p.detach(), trained[i++]));
    CHECK(p.grad().defined());
  }
  // The reference's scores equal a fresh model with the starting weights.
  torch::manual_seed(1);
  auto start = ltrain::models::build(cfg.model, {6}, 13, /*tokens=*/true);
  const auto flat = x.transpose(0, 1).reshape({-1, 6}),
             targets = y.transpose(0, 1).reshape({-1, 6});
  torch::NoGradGuard no_grad;
  const auto ref = sequenceLogProbs(start->forward(flat), targets);
  const auto mine = sequenceLogProbs(model->forward(flat), targets);
  const auto rewards = 0.1 * (mine - ref);
  CHECK(t.stats[0].item<double>() == Approx(rewards.narrow(0, 0, 3).sum().item<double>()));
  CHECK(t.stats[1].item<double>() == Approx(rewards.narrow(0, 3, 3).sum().item<double>()));
}
