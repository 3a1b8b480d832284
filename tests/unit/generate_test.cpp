// Generation with the cache of keys and values against the model run on the whole context at
// each step: the same greedy tokens for gpt and llama (GQA), past block_size too, where the
// context slides; and seeded sampling that repeats itself and keeps to top-k.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/models/generate.h"
#include "ltrain/models/model.h"

namespace {

// Greedy decoding without a cache: the whole (slid) context through forward() every step.
std::vector<int64_t> uncached(ltrain::models::Classifier& m, int64_t block,
                              std::vector<int64_t> ctx, int64_t n) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  int64_t window_start = ctx.size() > static_cast<size_t>(block) ? ctx.size() - block : 0;
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(ctx.size()) - window_start > block)  // as generate() slides
      window_start = static_cast<int64_t>(ctx.size()) - std::max<int64_t>(1, block / 2);
    std::vector<int64_t> w(ctx.begin() + window_start, ctx.end());
    auto logits = m->forward(torch::tensor(w, torch::kLong).view({1, -1}));
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    out.push_back(next);
    ctx.push_back(next);
  }
  return out;
}

}  // namespace

TEST_CASE("greedy generation with the KV cache equals recomputing the whole context") {
  for (const std::string name : {"gpt", "llama", "qwen3", "mistral"}) {
    INFO(name);
    auto cfg = ltrain::config::defaults();
    cfg.model.name = name;
    cfg.model.head_dim = name == "qwen3" ? 12 : 0;
    cfg.model.sliding_window = name == "mistral" ? 6 : 0;  // keys beyond 6 back are masked
    cfg.model.n_layer = 2;
    cfg.model.n_head = 4;
    cfg.model.n_kv_head = 2;
    cfg.model.n_embd = 32;
    cfg.model.intermediate_size = 48;
    cfg.model.block_size = 16;
    torch::manual_seed(4);
    auto m = ltrain::models::build(cfg.model, {16}, 50, true);
    m->eval();
    const std::vector<int64_t> prompt{3, 14, 15, 9, 2};
    ltrain::models::SamplingOptions o;
    o.temperature = 0;
    o.max_new_tokens = 30;  // past block_size: the window slides twice
    const auto cached = ltrain::models::generate(m, 16, prompt, o, torch::kCPU);
    CHECK(cached == uncached(m, 16, prompt, 30));
  }
}

TEST_CASE("sampling is seeded and top-k keeps to the k most likely tokens") {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "llama";
  cfg.model.n_layer = 1;
  cfg.model.n_embd = 16;
  cfg.model.n_head = 2;
  cfg.model.intermediate_size = 32;
  cfg.model.block_size = 32;
  torch::manual_seed(1);
  auto m = ltrain::models::build(cfg.model, {32}, 40, true);
  ltrain::models::SamplingOptions o;
  o.max_new_tokens = 12;
  o.seed = 9;
  const auto a = ltrain::models::generate(m, 32, {1, 2, 3}, o, torch::kCPU);
  CHECK(a == ltrain::models::generate(m, 32, {1, 2, 3}, o, torch::kCPU));
  o.seed = 10;
  CHECK(a != ltrain::models::generate(m, 32, {1, 2, 3}, o, torch::kCPU));
  // top-k 1 is greedy whatever the temperature and seed.
  o.top_k = 1;
  o.temperature = 5;
  auto greedy = o;
  greedy.temperature = 0;
  CHECK(ltrain::models::generate(m, 32, {1, 2, 3}, o, torch::kCPU) ==
        ltrain::models::generate(m, 32, {1, 2, 3}, greedy, torch::kCPU));
  // A tiny top-p keeps only the most likely token too.
  o.top_k = 0;
  o.top_p = 1e-6;
  CHECK(ltrain::models::generate(m, 32, {1, 2, 3}, o, torch::kCPU) ==
        ltrain::models::generate(m, 32, {1, 2, 3}, greedy, torch::kCPU));
}
