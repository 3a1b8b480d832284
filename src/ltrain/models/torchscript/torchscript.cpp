// model.name torchscript: a PyTorch module brought as a TorchScript archive
// (torch.jit.script(module).save(path), or torch.jit.trace). Its parameters and buffers are
// registered on the Classifier under the module's own names (each submodule mirrored by an empty
// torch::nn::Module), sharing the TorchScript module's tensors: DDP's hooks, the optimizer,
// checkpoints and model.safetensors see them as they see any model's, and forward runs the
// TorchScript graph.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/model.h"

namespace ltrain::models {
namespace {

class Scripted final : public ScriptedModel {
 public:
  explicit Scripted(torch::jit::Module m) : m_(std::move(m)) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    auto out = m_.forward({x});
    TORCH_CHECK(out.isTensor(), "the TorchScript module's forward must return a tensor");
    return out.toTensor();
  }
  void train(bool on) override { m_.train(on); }
  torch::jit::Module& module() { return m_; }

 private:
  torch::jit::Module m_;
};

// The module's own parameters and buffers on `mirror`, and its submodules' on children of it.
void mirror(const torch::jit::Module& m, torch::nn::Module& into) {
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    into.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) into.register_buffer(b.name, b.value);
  for (const auto& c : m.named_children()) {
    auto child = std::make_shared<torch::nn::Module>();
    mirror(c.value, *child);
    into.register_module(c.name, child);
  }
}

std::string shapeText(at::IntArrayRef s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

Classifier loadTorchScript(const std::string& path, const std::vector<int64_t>& input_shape,
                           int64_t num_classes, bool tokens) {
  std::error_code ec;
  if (path.empty())
    throw UsageError("model.path is empty: model.name torchscript needs the module's file");
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(
        fmt::format("model.path '{}' not found (expected a TorchScript file: "
                    "torch.jit.script(module).save(path))",
                    path));
  torch::jit::Module m;
  try {
    m = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    const std::string why = e.what_without_backtrace();
    throw UsageError(fmt::format(
        "model.path '{}' is not a TorchScript archive (torch.jit.script(module).save(path) makes "
        "one): {}",
        path, why.substr(0, why.find('\n'))));
  }
  if (m.parameters().size() == 0)
    throw UsageError(fmt::format("model.path '{}': the module has no parameters to train", path));
  const auto schema = m.get_method("forward").function().getSchema();
  size_t required = 0;
  for (const auto& arg : schema.arguments())
    if (!arg.default_value()) ++required;
  if (required != 2)  // self and the batch
    throw UsageError(fmt::format(
        "model.path '{}': forward takes {} argument(s) besides self; ltrain passes the batch "
        "alone (forward(self, x))",
        path, required - 1));
  auto scripted = std::make_shared<Scripted>(m);
  Classifier c(scripted);
  mirror(m, *c);

  // The contract: the batch the data gives in, class scores out.
  std::vector<int64_t> batch{2};
  batch.insert(batch.end(), input_shape.begin(), input_shape.end());
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    c->eval();
    try {
      out = c->forward(tokens ? torch::zeros(batch, torch::kLong) : torch::zeros(batch));
    } catch (const std::exception& e) {
      std::string why = e.what();
      throw UsageError(fmt::format("model.path '{}': forward fails on a batch of {}: {}", path,
                                   shapeText(batch), why.substr(0, why.find('\n'))));
    }
    c->train();
  }
  std::vector<int64_t> want{2};
  if (tokens) want.push_back(input_shape[0]);
  want.push_back(num_classes > 0 ? num_classes : out.size(-1));  // 0: only the data says
  if (out.sizes().vec() != want)
    throw UsageError(
        fmt::format("model.path '{}': forward returned {} for a batch of {}, expected {} ({})",
                    path, shapeText(out.sizes()), shapeText(batch), shapeText(want),
                    tokens ? "a score per token and vocabulary entry" : "class scores"));
  return c;
}

}  // namespace ltrain::models

namespace ltrain::models::torchscript {

ModelBuilder builder() {
  ModelBuilder b;
  b.build = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t classes,
               bool tokens) { return loadTorchScript(cfg.path, shape, classes, tokens); };
  return b;
}

}  // namespace ltrain::models::torchscript
