#include "ltrain/models/activation_checkpoint.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "ltrain/models/layer_runner.h"
#include "ltrain/models/model.h"

namespace ltrain::models {
namespace {

// A generator's state: read and set under its lock, as torch.random.fork_rng does.
struct RngState {
  at::Generator gen;
  at::Tensor state;
  static RngState of(at::Generator g) {
    std::lock_guard<std::mutex> lk(g.mutex());
    return {g, g.get_state()};
  }
  void restore() const {
    at::Generator g = gen;  // a handle: the same generator
    std::lock_guard<std::mutex> lk(g.mutex());
    g.set_state(state);
  }
};

struct AutocastState {
  c10::DeviceType device;
  bool enabled;
  at::ScalarType dtype;
  static AutocastState of(c10::DeviceType d) {
    return {d, at::autocast::is_autocast_enabled(d), at::autocast::get_autocast_dtype(d)};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
  }
};

struct CheckpointBackward : torch::autograd::Node {
  Segment segment;
  torch::Tensor input;  // detached: what the rerun starts from
  bool input_requires_grad = false;
  std::vector<torch::Tensor> buffers;
  std::vector<RngState> rng;  // as the forward found them
  AutocastState autocast{c10::DeviceType::CPU, false, at::kBFloat16};

  std::string name() const override { return "ltrain::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads[0].defined()) return {torch::Tensor()};  // the output fed nothing
    // The generators as they are now come back after the rerun (torch.random.fork_rng).
    std::vector<RngState> now;
    for (const auto& r : rng) now.push_back(RngState::of(r.gen));
    for (const auto& r : rng) r.restore();
    std::vector<torch::Tensor> kept;
    {
      torch::NoGradGuard no_grad;
      for (const auto& b : buffers) kept.push_back(b.clone());
    }
    const auto prev = AutocastState::of(autocast.device);
    torch::Tensor x = input.detach().requires_grad_(input_requires_grad), y;
    {
      torch::AutoGradMode grad(true);
      autocast.apply();
      y = segment(x);
      prev.apply();
      at::autocast::clear_cache();
    }
    for (const auto& r : now) r.restore();
    torch::autograd::backward({y}, {grads[0]});
    {
      // After the backward, which checks that what batch norm saved (its running statistics
      // among them) is unchanged.
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
    }
    return {input_requires_grad ? x.grad() : torch::Tensor()};
  }

  void release_variables() override {
    input.reset();
    segment = nullptr;
  }
};

}  // namespace

torch::Tensor checkpointed(Segment segment, const torch::Tensor& x,
                           std::vector<torch::Tensor> buffers) {
  auto node =
      std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->rng.push_back(RngState::of(at::detail::getDefaultCPUGenerator()));
  if (x.is_cuda())
    node->rng.push_back(RngState::of(at::globalContext().defaultGenerator(x.device())));
  node->autocast = AutocastState::of(x.device().type());
  node->input = x.detach();
  node->input_requires_grad = x.requires_grad();
  node->buffers = std::move(buffers);
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = segment(x);
  }
  node->segment = std::move(segment);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

int64_t applyActivationCheckpointing(ClassifierImpl& model, int64_t every) {
  std::vector<std::pair<size_t, size_t>> runs;
  if (every > 0) {
    // Runs of consecutive repeated blocks, cut every `every` blocks.
    std::pair<size_t, size_t> open{0, 0};
    auto close = [&] {
      if (open.second > open.first) runs.push_back(open);
      open = {0, 0};
    };
    for (size_t i = 0; i < model.layers->size(); ++i) {
      const bool block = dynamic_cast<const RepeatedBlock*>(model.layers->ptr(i).get()) != nullptr;
      if (!block) {
        close();
        continue;
      }
      if (open.second == open.first) open = {i, i};
      open.second = i + 1;
      if (static_cast<int64_t>(open.second - open.first) == every) close();
    }
    close();
  }
  if (!model.runner) model.runner = std::make_shared<LayerRunner>();
  model.runner->checkpointed = std::move(runs);
  return static_cast<int64_t>(model.runner->checkpointed.size());
}

void setLayerHooks(ClassifierImpl& model, std::shared_ptr<LayerHooks> hooks) {
  if (!model.runner) model.runner = std::make_shared<LayerRunner>();
  model.runner->hooks = std::move(hooks);
}

torch::Tensor LayerRunner::run(torch::nn::Sequential layers, torch::Tensor x, size_t begin,
                               size_t end, bool training) const {
  const bool recompute = training && torch::GradMode::is_enabled() && !checkpointed.empty();
  auto* seq = layers.get();  // a layer's forward is not const
  auto layer = [seq](size_t j) { return seq->begin() + static_cast<std::ptrdiff_t>(j); };
  size_t i = begin;
  while (i < end) {
    size_t stop = i;  // the checkpointed run that holds layer i (cut at a stage's end), if any
    if (recompute)
      for (const auto& [a, b] : checkpointed)
        if (a <= i && i < b) stop = std::min(b, end);
    if (stop == i) {
      if (hooks) hooks->beforeLayer(i);
      x = layer(i)->forward(x);
      if (hooks) x = hooks->afterLayer(i, x);
      ++i;
      continue;
    }
    // The hooks stay outside the recomputed run: its parameters are gathered for the forward
    // and again, by the outputs' backward, before the rerun.
    if (hooks)
      for (size_t j = i; j < stop; ++j) hooks->beforeLayer(j);
    std::vector<torch::Tensor> buffers;
    for (size_t j = i; j < stop; ++j)
      for (const auto& buf : layers->ptr(j)->buffers()) buffers.push_back(buf);
    x = models::checkpointed(
        [layer, i, stop](const torch::Tensor& in) {
          torch::Tensor a = in;
          for (size_t j = i; j < stop; ++j) a = layer(j)->forward(a);
          return a;
        },
        x, std::move(buffers));
    if (hooks)
      for (size_t j = i; j < stop; ++j) x = hooks->afterLayer(j, x);
    i = stop;
  }
  return x;
}

}  // namespace ltrain::models
