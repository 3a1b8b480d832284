// model.name layers against PyTorch: the same YAML built by ltrain and by
// bench/reference/layers_ref.py gives the same parameter names and shapes (a strict
// load_state_dict of ltrain's weights into the nn.Sequential) and the same outputs, for every
// layer type: images, feature vectors of [C, L], and token sequences.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include "ltrain/config/load.h"
#include "ltrain/io/safetensors.h"
#include "ltrain/models/layers/layer_graph.h"
#include "ltrain/models/model.h"
#include "support/process.h"
#include "test_paths.h"

namespace {
struct Net {
  const char* name;
  const char* layers;  // the YAML list
  std::vector<int64_t> shape;
  int64_t classes;
  bool tokens;
};

const char* kCheck = R"(
import sys, yaml, torch, torch.nn as nn
sys.path.insert(0, sys.argv[1])
from layers_ref import layer_modules
from safetensors.torch import load_file
spec = yaml.safe_load(open(sys.argv[2]))
model = nn.Module()
model.layers = nn.Sequential(*layer_modules(spec["layers"], spec["shape"], spec["classes"]))
model.load_state_dict(load_file(sys.argv[3]), strict=True)
model.eval()
io = load_file(sys.argv[4])
with torch.no_grad():
    out = model.layers(io["x"])
diff = (out - io["out"]).abs().max().item()
print(f"max_abs_diff {diff:.3g} params {sum(p.numel() for p in model.parameters())}")
import os; sys.stdout.flush(); os._exit(0 if diff < 1e-5 else 1)
)";
}  // namespace

TEST_CASE("a layer graph loads strictly into PyTorch's nn.Sequential and gives its outputs",
          "[parity]") {
  const std::vector<Net> nets{
      {"images",
       "[{conv2d: {out: 8, kernel: 3, padding: 1}}, {batch_norm2d: {}}, relu, {max_pool2d: 2},"
       " {residual: [{conv2d: {out: 8, kernel: 3, padding: same}}, {group_norm: 2}, silu]},"
       " {residual: {layers: [{conv2d: {out: 16, kernel: 3, stride: 2, padding: 1}}, gelu],"
       " projection: true}}, {avg_pool2d: {kernel: 2, stride: 1}}, {adaptive_avg_pool2d: 2},"
       " flatten, {dropout: 0.3}, {linear: {out: 24}}, {layer_norm: {}}, tanh,"
       " {sequential: [{linear: 16}, sigmoid, {rms_norm: {eps: 1.0e-5}}]}, {linear: 10}, softmax]",
       {3, 12, 12},
       10,
       false},
      {"signals",
       "[{conv1d: {out: 6, kernel: 3, dilation: 2}}, {batch_norm1d: {}}, relu,"
       " {conv1d: {out: 4, kernel: 2, stride: 2, groups: 2}}, flatten,"
       " {residual: {layers: [{linear: 5}], projection: true}}, {gelu: {approximate: tanh}},"
       " {linear: classes}]",
       {4, 16},
       7,
       false},
      {"tokens",
       "[{embedding: 16}, {layer_norm: {}}, {residual: [{linear: 32}, relu, {linear: 16}]},"
       " {rms_norm: {}}, {linear: {out: classes, bias: false}}]",
       {12},
       20,
       true},
  };
  ltrain::test::TempDir dir;
  ltrain::test::writeText(dir / "check.py", kCheck);
  for (const auto& net : nets) {
    INFO(net.name);
    auto lc = ltrain::config::loadConfigText(
        fmt::format("model:\n  name: layers\n  layers: {}\n", net.layers), "net.yaml", {});
    torch::manual_seed(3);
    auto model = ltrain::models::build(lc.cfg.model, net.shape, net.classes, net.tokens);
    std::vector<int64_t> batch{4};
    batch.insert(batch.end(), net.shape.begin(), net.shape.end());
    {
      torch::NoGradGuard no_grad;  // running statistics that are not the initial ones
      model->train();
      model->forward(net.tokens ? torch::randint(net.classes, batch) : torch::randn(batch));
    }
    model->eval();
    auto x = net.tokens ? torch::randint(net.classes, batch) : torch::randn(batch);
    auto out = model->forward(x).detach();
    ltrain::io::saveSafetensors(dir / "w.safetensors", ltrain::io::moduleState(*model));
    ltrain::io::saveSafetensors(dir / "io.safetensors", {{"x", x}, {"out", out}});
    YAML::Emitter spec;
    spec << YAML::BeginMap << YAML::Key << "layers" << YAML::Value << YAML::Load(net.layers)
         << YAML::Key << "shape" << YAML::Value << YAML::Flow << net.shape << YAML::Key << "classes"
         << YAML::Value << net.classes << YAML::EndMap;
    ltrain::test::writeText(dir / "spec.yaml", spec.c_str());
    auto r = ltrain::test::runProcess(
        {LTRAIN_PYTHON, dir / "check.py", std::string(LTRAIN_SOURCE_DIR) + "/bench/reference",
         dir / "spec.yaml", dir / "w.safetensors", dir / "io.safetensors"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Matchers::Contains(
                          "params " + std::to_string(ltrain::models::parameterCount(*model))));
  }
}
