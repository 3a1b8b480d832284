#include "ltrain/compute/devices.h"

#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>

#include "ltrain/common/errors.h"
#include "ltrain/cuda/plugin.h"
#include "ltrain/distributed/data_parallel.h"
#include "ltrain/models/layerwise.h"

namespace ltrain::compute {
namespace {

bool useCuda(config::DeviceChoice choice) {
  const bool available = torch::cuda::is_available();
  // A machine with an NVIDIA driver whose CUDA libraries failed to load must say so, under auto
  // too: training on its CPU instead would be a silent 100x slowdown.
  if (choice != config::DeviceChoice::kCpu && !available && !cuda::loadFailure().empty())
    throw UsageError(
        fmt::format("train.device {}: the CUDA libraries (libltrain_cuda.so) did not load: {}; set "
                    "train.device cpu (or LTRAIN_LOAD_CUDA=0) to train on the CPU",
                    config::toString(choice), cuda::loadFailure()));
  if (choice == config::DeviceChoice::kCuda && !available) {
    throw UsageError(
        "train.device cuda: no CUDA device is visible here (check the driver and "
        "CUDA_VISIBLE_DEVICES), or set train.device cpu");
  }
  return choice != config::DeviceChoice::kCpu && available;
}

}  // namespace

Devices chooseDevices(const config::ExperimentConfig& cfg, const distributed::Runtime& rt) {
  Devices d;
  const bool cuda = useCuda(cfg.train.device);
  const int64_t visible = cuda ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (cfg.dist.strategy == config::Strategy::kDp) {
    for (int64_t i = 0; i < visible; ++i)
      d.replicas.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    if (d.replicas.empty()) d.replicas.emplace_back(torch::kCPU);
    d.main = d.replicas.front();
    return d;
  }
  const int64_t n =
      cfg.model.placement == config::Placement::kPipeline ? cfg.model.pipeline_stages : 1;
  if (!cuda) {
    d.stages.assign(n, torch::kCPU);
    return d;
  }
  // Gloo (chosen explicitly) runs collectives on CUDA tensors of ranks that share a device,
  // which NCCL refuses: several ranks on one GPU then take turns on it, round robin. This is how
  // scripts/gpu_check.sh exercises the device path of sharded and split code on one GPU.
  if (n == 1 && cfg.dist.backend == config::Backend::kGloo && rt.local_rank >= visible) {
    d.stages.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(rt.local_rank % visible));
    d.main = d.stages.front();
    return d;
  }
  if ((rt.local_rank + 1) * n > visible)
    throw UsageError(fmt::format(
        "local rank {} needs cuda:{}..{} for its {} pipeline stage(s), but {} GPU(s) are visible; "
        "run {} process(es) per node{}, or set train.device cpu",
        rt.local_rank, rt.local_rank * n, (rt.local_rank + 1) * n - 1, n, visible,
        std::max<int64_t>(1, visible / n),
        n == 1 ? ", set dist.backend gloo to let ranks share a GPU" : ""));
  for (int64_t s = 0; s < n; ++s)
    d.stages.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(rt.local_rank * n + s));
  d.main = d.stages.front();
  return d;
}

void bindDevice(torch::Device d) {
  if (d.is_cuda()) at::accelerator::setDeviceIndex(d.index());
}

void placeModel(models::Classifier& model, const config::ModelConfig& m, const Devices& d) {
  if (m.placement == config::Placement::kPipeline) {
    models::applyPipeline(*model, d.stages, m.micro_batches, m.pipeline_schedule == "1f1b");
  } else if (model->deferred) {  // its parameters have no memory yet: they get it when sharded
    models::placeDeferred(model, d.main);
  } else {
    model->to(d.main);
  }
}

torch::Tensor forward(models::Classifier& model, const torch::Tensor& x, const Devices& d) {
  if (d.replicas.size() > 1) return distributed::dataParallelForward(model, x, d.replicas);
  return model->forward(x);
}

}  // namespace ltrain::compute
