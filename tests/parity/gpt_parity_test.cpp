// ltrain's GPT as PyTorch builds it (bench/reference/gpt_ref.py): the same parameter names and
// shapes (a strict load_state_dict of ltrain's safetensors), the same logits from the same weights
// and tokens, and the tied head saved once, for tied and untied heads; and PyTorch's weights
// loaded back into ltrain's model give PyTorch's logits.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/common/errors.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "test_paths.h"

TEST_CASE("ltrain's GPT loads strictly into PyTorch's and gives the same logits") {
  ltrain::test::TempDir dir;
  for (bool tied : {true, false}) {
    auto cfg = ltrain::config::defaults();
    cfg.model.name = "gpt";
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.n_embd = 16;
    cfg.model.block_size = 12;
    cfg.model.tie_weights = tied;
    torch::manual_seed(7);
    auto model = ltrain::models::build(cfg.model, {12}, 11);
    model->eval();
    auto x = torch::randint(11, {3, 12}, torch::kLong);
    auto logits = model->forward(x).detach();
    REQUIRE(logits.sizes() == torch::IntArrayRef({3, 12, 11}));
    // Causal: the first position's logits do not depend on later tokens.
    auto x2 = x.clone();
    x2.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1)}, 0);
    CHECK(torch::allclose(model->forward(x2).detach().select(1, 0), logits.select(1, 0)));
    const auto state = ltrain::io::moduleState(*model);
    const int64_t expected =
        11 * 16 + 12 * 16 +
        2 * (4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16) + 2 * 16 +
        (tied ? 0 : 11 * 16);
    CHECK(ltrain::models::parameterCount(*model) == expected);
    const std::string tag = tied ? "tied" : "untied";
    const std::string w = dir / ("w_" + tag + ".safetensors");
    const std::string io = dir / ("io_" + tag + ".safetensors");
    ltrain::io::saveSafetensors(w, state);
    ltrain::io::saveSafetensors(io, {{"x", x}, {"logits", logits}});
    ltrain::test::writeText(
        dir / "check.py",
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import torch, train_ref\n"
        "from safetensors.torch import load_file\n"
        "m = {'name': 'gpt', 'n_layer': 2, 'n_head': 2, 'n_embd': 16, 'block_size': 12,\n"
        "     'dropout': 0.0, 'tie_weights': sys.argv[2] == 'tied', 'activation': 'relu'}\n"
        "model = train_ref.Model(m, (12,), 11)\n"
        "model.load_state_dict(load_file(sys.argv[3]), strict=True)\n"
        "model.eval()\n"
        "io = load_file(sys.argv[4])\n"
        "with torch.no_grad():\n"
        "    diff = (model(io['x']) - io['logits']).abs().max().item()\n"
        "print(f'max_abs_diff {diff:.3g} params {sum(p.numel() for p in model.parameters())}')\n"
        "# The other way: PyTorch's own initialisation, for ltrain to load.\n"
        "torch.manual_seed(11)\n"
        "py = train_ref.Model(m, (12,), 11).eval()\n"
        "from safetensors.torch import save_file\n"
        "save_file({k: v.contiguous() for k, v in py.state_dict().items()}, sys.argv[5])\n"
        "with torch.no_grad():\n"
        "    save_file({'logits': py(io['x']).contiguous()}, sys.argv[6])\n"
        "import os; sys.stdout.flush(); os._exit(0 if diff < 1e-5 else 1)\n");
    const std::string py_w = dir / ("py_" + tag + ".safetensors");
    const std::string py_out = dir / ("py_out_" + tag + ".safetensors");
    auto r = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "check.py",
                                       std::string(LTRAIN_SOURCE_DIR) + "/bench/reference", tag, w,
                                       io, py_w, py_out});
    INFO(tag << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Matchers::Contains("params " + std::to_string(expected)));
    // PyTorch's weights into ltrain's model (as model.init_from loads them): the same logits.
    ltrain::io::loadModuleState(*model, py_w);
    auto py_logits = ltrain::io::loadSafetensors(py_out).at("logits");
    CHECK(torch::allclose(model->forward(x).detach(), py_logits, 1e-5, 1e-5));
  }
}

TEST_CASE("GPT configuration errors name the option") {
  auto cfg = ltrain::config::defaults();
  cfg.model.name = "gpt";
  cfg.model.n_embd = 30;
  cfg.model.n_head = 4;
  CHECK_THROWS_WITH(
      ltrain::models::build(cfg.model, {16}, 10),
      Catch::Matchers::Contains("model.n_embd (30) must be a multiple of model.n_head (4)"));
  cfg.model.n_embd = 32;
  cfg.model.block_size = 8;
  CHECK_THROWS_WITH(ltrain::models::build(cfg.model, {16}, 10),
                    Catch::Matchers::Contains("exceed model.block_size 8"));
  CHECK_THROWS_WITH(ltrain::models::build(cfg.model, {1, 28, 28}, 10),
                    Catch::Matchers::Contains("expected token sequences"));
}
