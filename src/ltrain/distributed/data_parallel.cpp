#include "ltrain/distributed/data_parallel.h"

#include <ATen/ThreadLocalState.h>
#include <c10/core/DeviceGuard.h>
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <exception>
#include <optional>
#include <thread>

namespace ltrain::distributed {

torch::Tensor dataParallelForward(models::Classifier& model, const torch::Tensor& x,
                                  const std::vector<torch::Device>& devices) {
  // A batch smaller than the device count uses fewer replicas.
  auto slices = x.chunk(static_cast<int64_t>(devices.size()), 0);
  const size_t n = slices.size();
  std::vector<torch::Device> used(devices.begin(), devices.begin() + static_cast<int64_t>(n));
  auto replicas = torch::nn::parallel::replicate(model, used);

  std::vector<torch::Tensor> outputs(n);
  std::vector<std::exception_ptr> errors(n);
  const at::ThreadLocalState caller;  // autocast, grad mode and the rest of the caller's state
  auto run = [&](size_t i) {
    try {
      at::ThreadLocalStateGuard state(caller);
      std::optional<c10::DeviceGuard> device;
      if (used[i].is_cuda()) device.emplace(used[i]);
      outputs[i] = replicas[i]->forward(slices[i].to(used[i], /*non_blocking=*/true));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(run, i);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  if (model->is_training()) {
    torch::NoGradGuard no_grad;
    auto mine = model->buffers(), first = replicas[0]->buffers();
    for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(first[i]);
  }
  for (auto& o : outputs) o = o.to(used.front());
  return torch::cat(outputs, 0);
}

}  // namespace ltrain::distributed
