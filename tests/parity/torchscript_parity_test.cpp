// model.name torchscript: a module scripted from Python (torch.jit.script(...).save) trained by
// ltrain with 2 processes and by Python DDP (torchrun) from the same file: the same loss at each
// of 50 steps (1e-5 relative) and the same final weights; ltrain's model.safetensors loads back,
// strictly, into the Python class the module came from.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <map>

#include "ltrain/io/safetensors.h"
#include "support/process.h"
#include "support/run_files.h"
#include "test_paths.h"

namespace {
const char* kNet = R"(
import torch, torch.nn as nn, torch.nn.functional as F
class Net(nn.Module):
    """A CNN with batch norm and a residual sum, written the way a user writes one."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8 * 7 * 7, 10)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        x = F.max_pool2d(x + self.block(x), 2)
        return self.head(torch.flatten(x, 1))
if __name__ == "__main__":
    import sys
    torch.manual_seed(0)
    torch.jit.script(Net()).save(sys.argv[1])
)";

const char* kLoadBack = R"(
import sys
sys.path.insert(0, sys.argv[1])
from net import Net
from safetensors.torch import load_file
m = Net()
m.load_state_dict(load_file(sys.argv[2]), strict=True)
print("loaded", sum(p.numel() for p in m.parameters()))
)";

std::map<int, double> losses(const std::string& path) {
  std::map<int, double> out;
  for (const auto& j : ltrain::test::metricRecords(path, "train"))
    out[j["step"].get<int>()] = j["loss"].get<double>();
  return out;
}
}  // namespace

TEST_CASE("a TorchScript module trains under ltrain's DDP as under PyTorch's", "[parity][slow]") {
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "net.py", kNet);
  auto made = ltrain::test::runProcess({LTRAIN_PYTHON, dir / "net.py", dir / "net.pt"});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  const std::string config = std::string(LTRAIN_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
  const std::vector<std::string> common{"model.name=torchscript",  "model.path=" + (dir / "net.pt"),
                                        "~model.hidden",           "data.batch_size=32",
                                        "train.max_steps=50",      "train.log_every=1",
                                        "train.threads=1",         "optimizer.lr=0.05",
                                        "scheduler.name=constant", "scheduler.warmup_steps=0"};
  std::vector<std::string> py{LTRAIN_TORCHRUN,
                              "--standalone",
                              "--nproc-per-node",
                              "2",
                              std::string(LTRAIN_SOURCE_DIR) + "/bench/reference/train_ref.py",
                              config};
  py.insert(py.end(), common.begin(), common.end());
  py.insert(py.end(), {"--ltrain", LTRAIN_BINARY, "--out", dir / "py"});
  auto p = ltrain::test::runProcess(py, {{"OMP_NUM_THREADS", "1"}});
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  std::vector<std::string> lt{LTRAIN_BINARY, "train", config};
  lt.insert(lt.end(), common.begin(), common.end());
  lt.insert(lt.end(), {"--nproc-per-node", "2", "--output-dir", dir / "lt"});
  auto l = ltrain::test::runProcess(lt);
  INFO(l.out << l.err);
  REQUIRE(l.exit_code == 0);

  auto a = losses(dir / "py/metrics.jsonl"), b = losses(dir / "lt/metrics.jsonl");
  REQUIRE(a.size() == 50);
  REQUIRE(b.size() == 50);
  double worst = 0;
  for (auto& [step, loss] : a) worst = std::max(worst, std::abs(loss - b[step]) / std::abs(loss));
  INFO("worst relative loss difference " << worst);
  CHECK(worst <= 1e-5);
  CHECK(a[50] < a[1]);
  auto wa = ltrain::io::loadSafetensors(dir / "py/model.safetensors");
  auto wb = ltrain::io::loadSafetensors(dir / "lt/model.safetensors");
  REQUIRE(wa.size() == wb.size());
  for (auto& [name, t] : wa) {
    INFO(name);
    REQUIRE(wb.count(name));
    CHECK((t.to(torch::kDouble) - wb[name].to(torch::kDouble)).abs().max().item<double>() <= 1e-5);
  }
  ltrain::test::writeText(dir / "load_back.py", kLoadBack);
  auto back = ltrain::test::runProcess(
      {LTRAIN_PYTHON, dir / "load_back.py", dir.path(), dir / "lt/model.safetensors"});
  INFO(back.err);
  CHECK(back.exit_code == 0);
  CHECK_THAT(back.out, Catch::Matchers::Contains("loaded"));
}

TEST_CASE("a TorchScript module that breaks the contract is refused, naming what it does") {
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "make.py", R"(
import sys, torch, torch.nn as nn
class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(36, 10)
    def forward(self, x, mask):
        return self.fc(x.flatten(1)) * mask
class NoParameters(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10]
class WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(36, 7)
    def forward(self, x):
        return self.fc(x.flatten(1))
for cls in (TwoInputs, NoParameters, WrongShape):
    torch.jit.script(cls()).save(f"{sys.argv[1]}/{cls.__name__}.pt")
)");
  REQUIRE(ltrain::test::runProcess({LTRAIN_PYTHON, dir / "make.py", dir.path()}).exit_code == 0);
  ltrain::test::writeText(dir / "c.yaml", "model: {name: torchscript}\n");
  for (auto [file, says] :
       {std::pair{"TwoInputs", "forward takes 2 argument(s) besides self; ltrain passes the batch"},
        std::pair{"NoParameters", "the module has no parameters to train"},
        std::pair{"WrongShape",
                  "forward returned [2, 7] for a batch of [2, 1, 6, 6], expected "
                  "[2, 10] (class scores)"}}) {
    auto r = ltrain::test::runLtrain(ltrain::test::syntheticRun(
        dir / "c.yaml", dir / "run",
        {"~model.hidden", "model.path=" + dir / (std::string(file) + ".pt")}));
    INFO(file << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Matchers::Contains(says));
  }
}
