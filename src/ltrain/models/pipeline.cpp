// Pipeline parallelism inside one process (model.placement: pipeline), GPipe's schedule: the batch
// is cut into micro-batches; at clock tick t stage s runs micro-batch t - s, so that with stages
// on different GPUs (CUDA runs each device's kernels asynchronously) stage s works on micro-batch
// m while stage s+1 works on m-1. All micro-batches go forward before the one backward pass, whose
// autograd engine runs each device's part on that device's own thread. The loss over the
// concatenated outputs is the unsplit batch's loss, so the gradients are the unsplit model's (up
// to rounding; dropout draws differ and batch norm sees micro-batch statistics, as in GPipe).
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdlib>

#include "ltrain/common/errors.h"
#include "ltrain/models/model.h"

namespace ltrain::models {

void ClassifierImpl::placePipeline(const std::vector<torch::Device>& devices,
                                   int64_t micro_batches_) {
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
  stages.clear();
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
  micro_batches = micro_batches_;
}

std::vector<ClassifierImpl::StageTensors> ClassifierImpl::stageTensors() const {
  std::vector<StageTensors> out;
  if (stages.empty()) {
    StageTensors all;
    const auto params = parameters();
    if (!params.empty()) all.device = params.front().device();
    for (const auto& p : named_parameters()) all.params.emplace_back(p.key(), p.value());
    all.buffers = buffers();
    out.push_back(std::move(all));
    return out;
  }
  for (const auto& st : stages) {
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

std::string ClassifierImpl::pipelineSummary() const {
  std::string out;
  for (const auto& st : stages)
    out += fmt::format("{}layers {}-{} on {}", out.empty() ? "" : ", ", st.begin, st.end - 1,
                       st.device.str());
  return out;
}

torch::Tensor ClassifierImpl::pipelineForward(const torch::Tensor& x) {
  auto acts = x.chunk(micro_batches, 0);
  const auto m_count = static_cast<int64_t>(acts.size());
  const auto s_count = static_cast<int64_t>(stages.size());
  for (int64_t tick = 0; tick < m_count + s_count - 1; ++tick) {
    for (int64_t s = std::min(tick, s_count - 1); s >= 0; --s) {
      const int64_t m = tick - s;
      if (m >= m_count) continue;
      const Stage& st = stages[s];
      auto a = acts[m].device() == st.device ? acts[m] : acts[m].to(st.device, true);
      acts[m] = runLayers(a, st.begin, st.end);
    }
  }
  return torch::cat(acts, 0);
}

}  // namespace ltrain::models
