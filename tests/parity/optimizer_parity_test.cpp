// The fused optimizers against torch.optim with fused=True, the same ATen kernels driven from
// Python: from the same parameters and gradient sequence, the same weights after five steps,
// one of them skipped by its found_inf flag (as a GradScaler or train.nonfinite skip makes it).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/config/schema.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/optim/fused.h"
#include "ltrain/optim/optimizer.h"
#include "support/process.h"
#include "test_paths.h"

namespace {
const char* kScript = R"(
import sys, torch
from safetensors.torch import load_file, save_file
name, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
t = load_file(src)
params = [t["p0"].clone().requires_grad_(), t["p1"].clone().requires_grad_()]
make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                         weight_decay=0.01, fused=True),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01, fused=True),
        "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01, fused=True)}
opt = make[name](params)
for step in range(5):
    for i, p in enumerate(params):
        p.grad = t[f"g{step}_{i}"].clone()
    if step != 2:  # the skipped step
        opt.step()
save_file({"p0": params[0].detach(), "p1": params[1].detach()}, dst)
)";
}  // namespace

TEST_CASE("fused SGD, Adam and AdamW step as torch.optim's fused=True, skips included",
          "[parity]") {
  using ltrain::config::OptimizerName;
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "opt.py", kScript);
  for (auto name : {OptimizerName::kSgd, OptimizerName::kAdam, OptimizerName::kAdamw}) {
    const std::string n = ltrain::config::toString(name);
    INFO(n);
    torch::manual_seed(11);
    std::vector<torch::Tensor> params{torch::randn({5, 3}).requires_grad_(),
                                      torch::randn({7}).requires_grad_()};
    ltrain::io::NamedTensors inputs{{"p0", params[0].detach().clone()},
                                    {"p1", params[1].detach().clone()}};
    std::vector<std::vector<torch::Tensor>> grads;
    for (int step = 0; step < 5; ++step) {
      grads.push_back({torch::randn({5, 3}), torch::randn({7})});
      for (int i = 0; i < 2; ++i)
        inputs.emplace_back(fmt::format("g{}_{}", step, i), grads.back()[i]);
    }
    ltrain::io::saveSafetensors(dir / "in.safetensors", inputs);

    auto cfg = ltrain::config::defaults().optimizer;
    cfg.name = name;
    cfg.lr = name == OptimizerName::kSgd ? 0.05 : 0.01;
    cfg.momentum = 0.9, cfg.nesterov = true, cfg.weight_decay = 0.01;
    auto opt = ltrain::optim::makeOptimizer(cfg, params);
    for (int step = 0; step < 5; ++step) {
      for (int i = 0; i < 2; ++i) params[i].mutable_grad() = grads[step][i].clone();
      ltrain::optim::setFoundInf(*opt, torch::full({1}, step == 2 ? 1.0 : 0.0));
      opt->step();
    }
    auto py = ltrain::test::runProcess(
        {LTRAIN_PYTHON, dir / "opt.py", n, dir / "in.safetensors", dir / "out.safetensors"});
    INFO(py.err);
    REQUIRE(py.exit_code == 0);
    auto want = ltrain::io::loadSafetensors(dir / "out.safetensors");
    CHECK(torch::equal(params[0].detach(), want["p0"]));
    CHECK(torch::equal(params[1].detach(), want["p1"]));
    // And Adam's step count skipped the flagged step, as torch.optim's does (4, not 5).
    if (name != OptimizerName::kSgd) {
      ltrain::optim::syncStepsToHost(*opt);
      const auto& st = *opt->state().at(params[0].unsafeGetTensorImpl());
      const int64_t steps = name == OptimizerName::kAdam
                                ? dynamic_cast<const torch::optim::AdamParamState&>(st).step()
                                : dynamic_cast<const torch::optim::AdamWParamState&>(st).step();
      CHECK(steps == 4);
    }
  }
}
