// dist.tensor_parallel applied from outside (models/parallelize.h): the spec's plan decides which
// parameters each rank holds a slice of, the values are the one-process build's sliced, a group of
// one gives the plain model's logits through the parallel code paths, and a plan that does not fit
// the model is refused naming the module.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/load.h"
#include "ltrain/models/parallel_modules.h"
#include "ltrain/models/parallelize.h"
#include "ltrain/models/tensor_parallel.h"

using Catch::Matchers::Contains;
using ltrain::models::TpRule;
using ltrain::models::TpStyle;

namespace {

ltrain::config::ModelConfig small(const std::string& name) {
  auto m = ltrain::config::defaults().model;
  m.name = name;
  m.n_layer = 2, m.n_head = 4, m.n_embd = 16, m.block_size = 8, m.intermediate_size = 24;
  m.n_kv_head = name == "gpt" ? 0 : 2;
  return m;
}

// A group of one rank: every collective is the identity.
struct Alone : ltrain::models::TensorParallelGroup {
  void allreduceSum(torch::Tensor&) override {}
  torch::Tensor allgather(const torch::Tensor& t) override { return t.unsqueeze(0); }
  torch::Tensor reduceScatter(const torch::Tensor& t) override { return t.clone(); }
};

// Rank `rank`'s share of `whole` along `dim`, split as `parts` runs each cut in two.
torch::Tensor halfOf(const torch::Tensor& whole, int64_t dim, int64_t parts, int64_t rank) {
  std::vector<torch::Tensor> pieces;
  for (const auto& run : whole.chunk(parts, dim)) pieces.push_back(run.chunk(2, dim)[rank]);
  return torch::cat(pieces, dim);
}

}  // namespace

TEST_CASE("the tensor-parallel plan splits gpt and llama as Megatron-LM does, values sliced") {
  for (std::string name : {"gpt", "llama", "qwen3"})
    for (bool tied : {true, false}) {
      INFO(name << (tied ? " tied" : " untied"));
      auto cfg = small(name);
      cfg.tie_weights = tied;
      torch::manual_seed(3);
      auto whole = ltrain::models::build(cfg, {8}, 12, true);
      const auto want = whole->named_parameters();
      for (int64_t rank : {0, 1}) {
        torch::manual_seed(3);
        auto local = ltrain::models::buildTensorParallel(cfg, {8}, 12, rank, 2);
        local->tp->fill(local);
        const auto have = local->named_parameters();
        REQUIRE(have.keys() == want.keys());
        // (dimension, runs) each parameter is split by; the rest are whole on every rank.
        auto expected = [&](const std::string& n) -> std::pair<int64_t, int64_t> {
          auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
          if (has("c_attn.")) return {0, 3};
          if (has("c_fc.") || has("q_proj") || has("k_proj") || has("v_proj") || has("gate_") ||
              has("up_") || has("wte") || has("embed_tokens") || has("lm_head") ||
              n == "layers.4.weight")
            return {0, 1};
          if (has("c_proj.weight") || has("o_proj") || has("down_")) return {1, 1};
          return {-1, 1};  // norms, wpe, row-parallel biases, qwen3's per-head norms
        };
        for (const auto& p : want) {
          INFO(p.key());
          const auto [dim, parts] = expected(p.key());
          const auto& mine = have[p.key()];
          CHECK(local->tp->split(p.key()).dim == dim);
          if (dim < 0)
            CHECK(torch::equal(mine, p.value()));
          else
            CHECK(torch::equal(mine, halfOf(p.value(), dim, parts, rank)));
        }
      }
    }
}

TEST_CASE("a tensor-parallel group of one gives the plain model's logits and gradients") {
  for (std::string name : {"gpt", "llama", "qwen3"})
    for (bool sequence_parallel : {false, true}) {
      INFO(name << (sequence_parallel ? " sequence parallel" : ""));
      auto cfg = small(name);
      torch::manual_seed(5);
      auto plain = ltrain::models::build(cfg, {8}, 12, true);
      torch::manual_seed(5);
      auto tp = ltrain::models::buildTensorParallel(cfg, {8}, 12, 0, 1, false, sequence_parallel);
      tp->tp->group = std::make_shared<Alone>();
      tp->tp->fill(tp);
      const auto ids = torch::randint(12, {2, 8}, torch::kLong);
      const auto a = plain->forward(ids), b = tp->forward(ids);
      CHECK(torch::allclose(a, b, 1e-6, 1e-6));
      a.pow(2).sum().backward();
      b.pow(2).sum().backward();
      const auto ga = plain->named_parameters(), gb = tp->named_parameters();
      for (const auto& p : ga) {
        INFO(p.key());
        CHECK(torch::allclose(p.value().grad(), gb[p.key()].grad(), 1e-5, 1e-6));
      }
    }
}

TEST_CASE("a tensor-parallel plan that does not fit the model is refused naming the module") {
  auto cfg = small("llama");
  auto model = ltrain::models::build(cfg, {8}, 12, true);
  auto tp = std::make_shared<ltrain::models::TensorParallelism>();
  tp->size = 2;
  CHECK_THROWS_WITH(
      ltrain::models::parallelize(model, {{"model.layers.*.mlp.in_proj", TpStyle::kColwise}}, tp),
      Contains("no module 'model.layers.*.mlp.in_proj'"));
  model = ltrain::models::build(cfg, {8}, 12, true);
  CHECK_THROWS_WITH(ltrain::models::parallelize(model, {{"model.norm", TpStyle::kRowwise}}, tp),
                    Contains("'model.norm' is row-parallel") && Contains("not a models::Linear"));
}
