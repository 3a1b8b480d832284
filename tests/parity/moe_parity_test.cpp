// Mixtures of experts against the real thing: transformers' MixtralForCausalLM and
// Qwen3MoeForCausalLM, made small here and saved as the hub's files.
// - ltrain loads them and gives their logits, their routers' load-balancing loss (aux_loss) and
//   their loss with the routers' term (output_router_logits), within 1e-5;
// - the dropless dispatch gives each token the weighted sum of its top-k experts, computed here
//   token by token;
// - training from them with AdamW and clipping, the routers' loss in the objective, equals
//   transformers + PyTorch (bench/reference/train_ref.py, DDP under the real torchrun for two
//   processes) step for step: the loss, the reported aux_loss and the final weights.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/load.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/model.h"
#include "ltrain/models/moe.h"
#include "support/process.h"
#include "support/reference_run.h"
#include "support/run_files.h"
#include "test_paths.h"

using ltrain::test::runProcess;
using ltrain::test::TempDir;

namespace {

const std::string kSrc = LTRAIN_SOURCE_DIR;
const std::string kTools = kSrc + "/tests/parity/hf_tools.py";

void run(const std::vector<std::string>& argv) {
  auto r = runProcess(argv, {{"OMP_NUM_THREADS", "1"}});
  INFO(argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << ":\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

double maxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a - b).abs().max().item<double>();
}

ltrain::config::ModelConfig hfModel(const std::string& dir) {
  return ltrain::config::loadConfigText(
             "data: {dataset: tokens}\nmodel: {init_from: " + dir + "}\n", "test.yaml", {})
      .cfg.model;
}

// Every token's output by the definition: softmax over the router's logits, the top k, (their
// renormalised weights), and the weighted sum of those experts' SwiGLU outputs.
torch::Tensor tokenByToken(ltrain::models::MoeBlockImpl& moe, const torch::Tensor& x) {
  auto out = torch::zeros_like(x);
  for (int64_t i = 0; i < x.size(0); ++i) {
    const auto row = x[i].unsqueeze(0);
    auto probs = torch::softmax(torch::matmul(row, moe.gate->weight.t()), -1);
    auto [w, e] = probs.topk(moe.shape.top_k, -1);
    if (moe.shape.norm_topk) w = w / w.sum(-1, true);
    for (int64_t j = 0; j < moe.shape.top_k; ++j)
      out[i] += w[0][j] * moe.experts[e[0][j].item<int64_t>()]->forward(row)[0];
  }
  return out;
}

}  // namespace

TEST_CASE("ltrain's Mixtral and Qwen3-MoE give transformers' logits and routers' loss",
          "[parity][hf]") {
  TempDir dir;
  struct Case {
    std::string name, make;
    std::vector<std::string> flags;
  };
  for (const auto& c :
       std::vector<Case>{{"mixtral-window-8", "make-mixtral", {"--window", "8", "--seed", "3"}},
                         {"mixtral-tied", "make-mixtral", {"--tied", "--seed", "4"}},
                         {"qwen3_moe", "make-qwen3_moe", {"--seed", "5"}},
                         {"qwen3_moe-raw-topk", "make-qwen3_moe", {"--raw-topk", "--seed", "6"}}}) {
    INFO(c.name);
    const std::string hf = dir / c.name;
    std::vector<std::string> argv{LTRAIN_PYTHON, kTools, c.make,  hf,
                                  "--vocab",     "96",   "--aux", "0.5"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    run(argv);
    const auto m = hfModel(hf);
    const bool qwen = c.make == "make-qwen3_moe";
    CHECK(m.name == (qwen ? "qwen3_moe" : "mixtral"));
    CHECK(m.num_experts == (qwen ? 6 : 4));
    CHECK(m.num_experts_per_tok == (qwen ? 3 : 2));
    CHECK(m.router_aux_loss_coef == 0.5);
    if (qwen) {
      CHECK(m.moe_intermediate_size == 24);
      CHECK(m.norm_topk_prob == (c.name == "qwen3_moe"));
    } else {
      CHECK(m.sliding_window == (c.name == "mixtral-window-8" ? 8 : 0));
    }

    torch::manual_seed(1);
    auto model = ltrain::models::build(m, {32}, 96, /*tokens=*/true);
    ltrain::models::loadInitialWeights(model, m);
    model->train();  // no dropout here; the routers report in training
    const auto ids = torch::randint(96, {2, 24}, torch::kLong);
    ltrain::io::saveSafetensors(dir / "ids.safetensors", {{"ids", ids}});
    run({LTRAIN_PYTHON, kTools, "router-losses", hf, dir / "ids.safetensors",
         dir / "theirs.safetensors"});
    const auto theirs = ltrain::io::loadSafetensors(dir / "theirs.safetensors");
    torch::NoGradGuard no_grad;
    ltrain::models::RouterTally routers;
    const auto logits = model->forward(ids);
    REQUIRE(routers.layers() == 2);
    const double by_logits = maxDiff(logits, theirs.at("logits"));
    INFO("max abs logit difference " << by_logits);
    CHECK(by_logits <= 1e-5);
    const double aux = routers.auxLoss().item<double>();
    const double their_aux = theirs.at("aux_loss").item<double>();
    CHECK(std::abs(aux - their_aux) <= 1e-5 * their_aux);
    // transformers' loss with labels: next-token cross-entropy plus coef x aux_loss.
    const auto ce = torch::nn::functional::cross_entropy(logits.narrow(1, 0, 23).reshape({-1, 96}),
                                                         ids.narrow(1, 1, 23).reshape(-1));
    CHECK(std::abs(ce.item<double>() + 0.5 * aux - theirs.at("loss").item<double>()) <= 1e-5);
    // Every expert got tokens, k per token in each layer.
    const auto counts = routers.counts();
    CHECK(counts.sum(1).eq(48.0 * static_cast<double>(m.num_experts_per_tok)).all().item<bool>());
  }
}

TEST_CASE("dropless dispatch gives each token the weighted sum of its top-k experts", "[models]") {
  for (const bool norm : {true, false}) {
    INFO("norm_topk " << norm);
    torch::manual_seed(2);
    ltrain::models::MoeShape shape;
    shape.experts = 5, shape.top_k = 2, shape.width = 12, shape.norm_topk = norm;
    ltrain::models::MoeBlock moe(16, shape);
    torch::NoGradGuard no_grad;
    for (auto& p : moe->parameters()) p.normal_(0.0, 0.5);
    // Route everything away from expert 3, so that an expert without tokens is in the loop.
    moe->gate->weight[3].fill_(0).add_(-100.0);
    const auto x = torch::randn({2, 9, 16}).abs();
    const auto out = moe->forward(x);
    CHECK(out.sizes() == x.sizes());
    CHECK(maxDiff(out.reshape({-1, 16}), tokenByToken(*moe, x.reshape({-1, 16}))) <= 1e-5);
  }
}

TEST_CASE(
    "Mixtral and Qwen3-MoE train as transformers and PyTorch do with the routers' loss, alone "
    "and under DDP",
    "[parity][slow][hf]") {
  TempDir dir;
  const std::string tokens = dir / "tokens";
  run({LTRAIN_PYTHON, kSrc + "/scripts/prepare_tokens.py", "/usr/share/games/fortunes/cookie",
       "--out", tokens, "--vocab-size", "320"});
  for (const std::string family : {"mixtral", "qwen3_moe"}) {
    const std::string base = dir / family;
    run({LTRAIN_PYTHON, kTools, "make-" + family, base, "--vocab", "320", "--seed", "7"});
    const std::string config = dir / (family + ".yaml");
    ltrain::test::writeText(config,
                            "seed: 1\n"
                            "data: {dataset: tokens, path: " +
                                tokens +
                                ", batch_size: 8}\n"
                                "model: {init_from: " +
                                base +
                                ", block_size: 32, output_router_logits: true,\n"
                                "        router_aux_loss_coef: 0.5}\n"
                                "optimizer: {name: adamw, lr: 0.002, weight_decay: 0.01}\n"
                                "train: {max_steps: 12, log_every: 1, threads: 1, "
                                "eval_every: 0,\n"
                                "        checkpoint_every: 0, clip_grad_norm: 1.0}\n");
    for (const int n : {1, 2}) {
      INFO(family << ", " << n << " process(es)");
      const std::string py = dir / (family + "-py" + std::to_string(n)),
                        lt = dir / (family + "-lt" + std::to_string(n));
      const auto losses =
          ltrain::test::trainBesideReference(config, base + "/model.safetensors", n, py, lt);
      REQUIRE(losses.reference.size() == 12);
      INFO(losses.describe());
      CHECK(losses.worstRelative() <= 1e-5);
      CHECK(losses.reference.at(12) < losses.reference.at(1));  // it trained

      // The routers' loss as both report it, step by step; ltrain's balance beside it.
      const auto theirs = ltrain::test::metricRecords(py + "/metrics.jsonl", "train");
      const auto mine = ltrain::test::metricRecords(lt + "/metrics.jsonl", "train");
      REQUIRE(theirs.size() == mine.size());
      for (size_t i = 0; i < mine.size(); ++i) {
        INFO("step " << i + 1);
        const double a = theirs[i]["aux_loss"].get<double>(), b = mine[i]["aux_loss"].get<double>();
        CHECK(std::abs(a - b) <= 1e-5 * a);
        CHECK(mine[i]["expert_load_max_over_mean"].get<double>() >= 1.0);
      }

      // The final weights, experts and routers included, which moved by about 0.02. (At lr
      // 0.002: AdamW moves an element whose gradient is rounding noise by about lr a step, so a
      // larger rate would measure the noise, not the model; even here a lone element of an expert
      // may land 1e-5 away. So: every element within 5e-5, all but 1 in 1000 within 1e-5.)
      const auto ref = ltrain::io::loadSafetensors(py + "/model.safetensors");
      const auto got = ltrain::io::loadSafetensors(lt + "/model.safetensors");
      REQUIRE(ref.size() == got.size());
      double worst = 0;
      int64_t elements = 0, outside = 0;
      for (const auto& [name, t] : ref) {
        INFO(name);
        REQUIRE(got.count(name));
        worst = std::max(worst, maxDiff(t, got.at(name)));
        elements += t.numel();
        outside += (t - got.at(name)).abs().gt(1e-5).sum().item<int64_t>();
      }
      INFO("final weights max abs diff " << worst << "; " << outside << " of " << elements
                                         << " elements beyond 1e-5");
      CHECK(worst <= 5e-5);
      CHECK(outside * 1000 <= elements);
    }
  }
}
