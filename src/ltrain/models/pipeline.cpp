// Pipeline parallelism inside one process (model.placement: pipeline), GPipe's schedule: the batch
// is cut into micro-batches; at clock tick t stage s runs micro-batch t - s, so that with stages
// on different GPUs (CUDA runs each device's kernels asynchronously) stage s works on micro-batch
// m while stage s+1 works on m-1. All micro-batches go forward before the one backward pass, whose
// autograd engine runs each device's part on that device's own thread. The loss over the
// concatenated outputs is the unsplit batch's loss, so the gradients are the unsplit model's (up
// to rounding; dropout draws differ and batch norm sees micro-batch statistics, as in GPipe).
// model.pipeline_schedule 1f1b (PipeDream-Flush's one-forward-one-backward) runs backward per
// stage and micro-batch instead: stage boundaries are cut (each stage starts from a detached
// input) and the gradient at a stage's input is handed to the stage before, so each stage frees a
// micro-batch's activations as soon as its backward has passed.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>

#include "ltrain/common/errors.h"
#include "ltrain/models/model.h"
#include "ltrain/models/pipeline.h"

namespace ltrain::models {

void applyPipeline(ClassifierImpl& model, const std::vector<torch::Device>& devices,
                   int64_t micro_batches, bool one_f_one_b) {
  auto& layers = model.layers;
  const size_t n = layers->size(), s = devices.size();
  if (s < 2 || s > n)
    throw UsageError(fmt::format(
        "model.pipeline_stages {}: the model has {} layers to split, expected 2..{}", s, n, n));
  std::vector<int64_t> params(n, 0);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    params[i] = parameterCount(*layers->ptr(i));
    total += params[i];
  }
  // Stage k ends where the running count comes closest to k+1 shares of the total, leaving at
  // least one layer for each stage after it.
  std::vector<Pipeline::Stage> stages;
  size_t begin = 0;
  int64_t running = 0;
  for (size_t k = 0; k < s; ++k) {
    size_t end = begin + 1;
    running += params[begin];
    const int64_t target = total * static_cast<int64_t>(k + 1) / static_cast<int64_t>(s);
    while (k + 1 < s && end < n - (s - k - 1) &&
           std::abs(running + params[end] - target) <= std::abs(running - target))
      running += params[end++];
    if (k + 1 == s) end = n;
    stages.push_back({begin, end, devices[k]});
    for (size_t i = begin; i < end; ++i) layers->ptr(i)->to(devices[k]);
    begin = end;
  }
  model.pipeline = std::make_shared<Pipeline>(std::move(stages), micro_batches, one_f_one_b);
}

std::vector<ClassifierImpl::StageTensors> ClassifierImpl::stageTensors() const {
  std::vector<StageTensors> out;
  if (!pipeline) {
    StageTensors all;
    const auto params = parameters();
    if (!params.empty()) all.device = params.front().device();
    for (const auto& p : named_parameters()) all.params.emplace_back(p.key(), p.value());
    all.buffers = buffers();
    out.push_back(std::move(all));
    return out;
  }
  for (const auto& st : pipeline->stages()) {
    StageTensors t;
    t.device = st.device;
    for (size_t i = st.begin; i < st.end; ++i) {
      const auto& layer = *layers->ptr(i);
      for (const auto& p : layer.named_parameters())
        t.params.emplace_back(layerPrefix(i) + p.key(), p.value());
      for (const auto& b : layer.buffers()) t.buffers.push_back(b);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string Pipeline::summary() const {
  std::string out;
  for (const auto& st : stages_)
    out += fmt::format("{}layers {}-{} on {}", out.empty() ? "" : ", ", st.begin, st.end - 1,
                       st.device.str());
  return out;
}

torch::Tensor Pipeline::forward(ClassifierImpl& model, const torch::Tensor& x) const {
  auto acts = x.chunk(micro_batches_, 0);
  const auto m_count = static_cast<int64_t>(acts.size());
  const auto s_count = static_cast<int64_t>(stages_.size());
  for (int64_t tick = 0; tick < m_count + s_count - 1; ++tick) {
    for (int64_t s = std::min(tick, s_count - 1); s >= 0; --s) {
      const int64_t m = tick - s;
      if (m >= m_count) continue;
      const Stage& st = stages_[s];
      auto a = acts[m].device() == st.device ? acts[m] : acts[m].to(st.device, true);
      acts[m] = model.runLayers(a, st.begin, st.end);
    }
  }
  return torch::cat(acts, 0);
}

std::vector<std::vector<int64_t>> Pipeline::oneFOneBOrder(int64_t stages, int64_t micro) {
  std::vector<std::vector<int64_t>> order(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s) {
    auto& ops = order[static_cast<size_t>(s)];
    const int64_t warm = std::min(stages - 1 - s, micro);
    for (int64_t m = 0; m < warm; ++m) ops.push_back(m);
    for (int64_t m = warm; m < micro; ++m) ops.push_back(m), ops.push_back(-(m - warm + 1));
    for (int64_t m = micro - warm; m < micro; ++m) ops.push_back(-(m + 1));
  }
  return order;
}

torch::Tensor Pipeline::step(ClassifierImpl& model, const torch::Tensor& x, const torch::Tensor& y,
                             const MicroBatchLoss& loss_sum, const torch::Tensor& scale,
                             const std::function<void(size_t)>& before_last_backward) const {
  const auto& stages = stages_;
  const auto xs = x.chunk(micro_batches_, 0), ys = y.chunk(micro_batches_, 0);
  const auto m_count = static_cast<int64_t>(xs.size());
  const auto s_count = static_cast<int64_t>(stages.size());
  const auto order = oneFOneBOrder(s_count, m_count);
  // The batch's target count on the device (an image skipped under data.on_bad_image has none):
  // each micro-batch's summed loss over it, as the unsplit batch's mean.
  const auto last_device = stages.back().device;
  const auto total = y.ge(0).sum().to(last_device, torch::kFloat).clamp_min(1);
  const auto factor = scale.to(last_device, torch::kFloat) / total;
  using Grid = std::vector<std::vector<torch::Tensor>>;
  Grid in(stages.size(), std::vector<torch::Tensor>(xs.size()));
  Grid out = in;
  std::vector<torch::Tensor> losses(xs.size());
  std::vector<std::vector<char>> forwarded(stages.size(), std::vector<char>(xs.size(), 0));
  auto backwarded = forwarded;
  std::vector<size_t> next(stages.size(), 0);
  auto mean = torch::zeros({}, torch::TensorOptions().device(last_device));
  // Every stage takes its next op when what it needs is done, stages in order: on GPUs the
  // stages' kernels then overlap as the schedule intends; on one CPU thread they run in turn.
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < stages.size(); ++s) {
      if (next[s] == order[s].size()) continue;
      const int64_t op = order[s][next[s]];
      const Stage& st = stages[s];
      if (op >= 0) {  // forward of micro-batch m
        const auto m = static_cast<size_t>(op);
        if (s > 0 && !forwarded[s - 1][m]) continue;
        torch::Tensor a = s == 0 ? xs[m] : out[s - 1][m].detach();
        if (a.device() != st.device) a = a.to(st.device, true);
        if (s > 0 && a.is_floating_point()) a.requires_grad_(true);
        in[s][m] = a;
        out[s][m] = model.runLayers(a, st.begin, st.end);
        if (s + 1 == stages.size()) {
          losses[m] = loss_sum(out[s][m].to(torch::kFloat), ys[m].to(st.device)) * factor;
          mean += losses[m].detach();
        }
        forwarded[s][m] = 1;
      } else {  // backward of micro-batch m
        const auto m = static_cast<size_t>(-op - 1);
        if (s + 1 < stages.size() && !backwarded[s + 1][m]) continue;
        if (m + 1 == xs.size() && before_last_backward) before_last_backward(s);
        if (s + 1 == stages.size()) {
          losses[m].backward();
          losses[m] = torch::Tensor();
        } else if (in[s + 1][m].defined() && in[s + 1][m].grad().defined()) {
          torch::autograd::backward({out[s][m]}, {in[s + 1][m].grad().to(st.device, true)});
        }
        if (s + 1 < stages.size()) in[s + 1][m] = torch::Tensor();
        out[s][m] = torch::Tensor();  // the micro-batch's activations on this stage go
        backwarded[s][m] = 1;
      }
      ++next[s];
      progress = true;
    }
  }
  for (size_t s = 0; s < stages.size(); ++s)
    TORCH_CHECK(next[s] == order[s].size(), "1F1B schedule stalled at stage ", s);
  return mean;
}

}  // namespace ltrain::models
