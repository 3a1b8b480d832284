// ResNet-18/34 as PyTorch builds it (bench/reference/train_ref.py's Model): the same parameter
// and buffer names and shapes (a strict load_state_dict of ltrain's safetensors), and the same
// logits from the same weights and input.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "test_paths.h"

TEST_CASE("ltrain's ResNet loads strictly into PyTorch's and gives the same logits", "[slow]") {
  ltrain::test::TempDir dir;
  for (int depth : {18, 34}) {
    auto cfg = ltrain::config::defaults();
    cfg.model.name = "resnet";
    cfg.model.depth = depth;
    cfg.model.width = 4;
    torch::manual_seed(depth);
    auto model = ltrain::models::build(cfg.model, {3, 16, 16}, 10);
    {
      torch::NoGradGuard no_grad;
      model->train();
      model->forward(torch::randn({8, 3, 16, 16}));  // running statistics that are not the init
    }
    model->eval();
    auto x = torch::randn({2, 3, 16, 16});
    auto logits = model->forward(x).detach();
    const std::string w = dir / ("w" + std::to_string(depth) + ".safetensors");
    const std::string io = dir / ("io" + std::to_string(depth) + ".safetensors");
    ltrain::io::saveSafetensors(w, ltrain::io::moduleState(*model));
    ltrain::io::saveSafetensors(io, {{"x", x}, {"logits", logits}});
    ltrain::test::writeText(
        dir / "check.py",
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import torch, train_ref\n"
        "from safetensors.torch import load_file\n"
        "m = {'name': 'resnet', 'depth': int(sys.argv[2]), 'width': 4, 'activation': 'relu'}\n"
        "model = train_ref.Model(m, (3, 16, 16), 10)\n"
        "model.load_state_dict(load_file(sys.argv[3]), strict=True)\n"
        "model.eval()\n"
        "io = load_file(sys.argv[4])\n"
        "with torch.no_grad():\n"
        "    diff = (model(io['x']) - io['logits']).abs().max().item()\n"
        "print(f'max_abs_diff {diff:.3g} params {sum(p.numel() for p in model.parameters())}')\n"
        "import os; sys.stdout.flush(); os._exit(0 if diff < 1e-4 else 1)\n");
    auto r = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "check.py",
                                       std::string(LTRAIN_SOURCE_DIR) + "/bench/reference",
                                       std::to_string(depth), w, io});
    INFO("depth " << depth << "\n" << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Matchers::Contains(
                          "params " + std::to_string(ltrain::models::parameterCount(*model))));
  }
}
