// train.activation_checkpointing: the recomputed forward gives the plain run's loss and
// gradients with dropout on (the generator's draws repeat), batch norm's running statistics move
// once a step, not twice, and a pipeline's stages checkpoint their own blocks.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "ltrain/config/schema.h"
#include "ltrain/models/model.h"

namespace {
ltrain::config::ModelConfig modelConfig(const std::string& name, double dropout) {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = name;
  cfg.model.n_layer = 4;
  cfg.model.n_head = 2;
  cfg.model.n_kv_head = 1;
  cfg.model.n_embd = 16;
  cfg.model.block_size = 8;
  cfg.model.dropout = dropout;
  cfg.model.width = 4;
  return cfg.model;
}

ltrain::models::Classifier make(const std::string& name, double dropout = 0.2) {
  torch::manual_seed(3);
  if (name == "resnet") return ltrain::models::build(modelConfig(name, dropout), {3, 16, 16}, 5);
  return ltrain::models::build(modelConfig(name, dropout), {8}, 13, /*tokens=*/true);
}

// Nodes of the loss's autograd graph that recompute checkpointed runs.
int64_t recomputeNodes(const torch::Tensor& loss) {
  std::set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{loss.grad_fn().get()};
  int64_t n = 0;
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    n += node->name() == "ltrain::CheckpointBackward";
    for (const auto& e : node->next_edges()) todo.push_back(e.function.get());
  }
  return n;
}

// One training forward and backward from the same generator state; the loss.
double step(ltrain::models::Classifier& m, const torch::Tensor& x, const torch::Tensor& y,
            int64_t* recomputed = nullptr) {
  torch::manual_seed(11);
  m->train();
  auto out = m->forward(x);
  auto loss = out.dim() == 3 ? torch::nn::functional::cross_entropy(out.flatten(0, 1), y.flatten())
                             : torch::nn::functional::cross_entropy(out, y);
  if (recomputed) *recomputed = recomputeNodes(loss);
  loss.backward();
  return loss.item<double>();
}

void sameGradients(ltrain::models::Classifier& a, ltrain::models::Classifier& b) {
  auto pa = a->named_parameters(), pb = b->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].key());
    REQUIRE(pb[i].key() == pa[i].key());  // names unchanged
    REQUIRE(pb[i].value().grad().defined());
    CHECK((pa[i].value().grad() - pb[i].value().grad()).abs().max().item<double>() <= 1e-6);
  }
  auto ba = a->named_buffers(), bb = b->named_buffers();
  for (size_t i = 0; i < ba.size(); ++i) {
    INFO(ba[i].key());
    CHECK(torch::equal(ba[i].value(), bb[i].value()));  // running statistics moved once
  }
}
}  // namespace

TEST_CASE("checkpointed blocks give the plain gradients with dropout on: gpt, llama, resnet") {
  for (const std::string name : {"gpt", "llama", "resnet"}) {
    INFO(name);
    for (int64_t every : {1, 3}) {
      INFO("every " << every);
      auto plain = make(name), ckpt = make(name);
      const int64_t runs = ltrain::models::applyActivationCheckpointing(*ckpt, every);
      // 4 blocks (gpt, llama) or 8 (resnet-18), cut every `every`.
      const int64_t blocks = name == "resnet" ? 8 : 4;
      CHECK(runs == (blocks + every - 1) / every);
      torch::manual_seed(5);
      torch::Tensor x, y;
      if (name == "resnet") {
        x = torch::randn({6, 3, 16, 16});
        y = torch::randint(5, {6}, torch::kLong);
      } else {
        x = torch::randint(13, {6, 8}, torch::kLong);
        y = torch::randint(13, {6, 8}, torch::kLong);
      }
      int64_t in_plain = -1, in_ckpt = -1;
      const double lp = step(plain, x, y, &in_plain), lc = step(ckpt, x, y, &in_ckpt);
      CHECK(lc == Approx(lp).epsilon(1e-6));
      // The runs really are recomputed: one node each in the graph, none without.
      CHECK(in_plain == 0);
      CHECK(in_ckpt == runs);
      sameGradients(plain, ckpt);
      // Evaluation runs the layers plainly, and agrees too.
      torch::NoGradGuard no_grad;
      plain->eval(), ckpt->eval();
      CHECK(torch::allclose(plain->forward(x), ckpt->forward(x), 1e-6, 1e-6));
    }
  }
}

TEST_CASE("a pipeline's stages recompute their own checkpointed blocks") {
  // Dropout draws differ between a pipeline's micro-batches and one batch: compared without.
  auto plain = make("gpt", 0.0), piped = make("gpt", 0.0);
  ltrain::models::applyActivationCheckpointing(
      *piped, 2);  // runs of blocks 1-2 and 3-4, cut by the stage boundary
  ltrain::models::applyPipeline(*piped, {torch::kCPU, torch::kCPU}, 3);
  torch::manual_seed(5);
  auto x = torch::randint(13, {7, 8}, torch::kLong), y = torch::randint(13, {7, 8}, torch::kLong);
  const double lp = step(plain, x, y), lc = step(piped, x, y);
  CHECK(lc == Approx(lp).epsilon(1e-6));
  auto pa = plain->named_parameters(), pb = piped->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].key());
    CHECK(torch::allclose(pa[i].value().grad(), pb[i].value().grad(), 1e-5, 1e-6));
  }
}
