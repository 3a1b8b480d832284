// The devices one process computes on: train.device (auto: cuda:<local rank> where CUDA is, else
// the CPU), one per pipeline stage (model.placement pipeline), or every visible GPU for
// dist.strategy dp; and binding the process to its GPU before any CUDA work.
#pragma once
#include <torch/types.h>

#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/distributed/runtime.h"
#include "ltrain/models/model.h"

namespace ltrain::compute {

struct Devices {
  torch::Device main{torch::kCPU};      // where batches go: the (first stage's) device
  std::vector<torch::Device> stages;    // pipeline: one per stage, main first
  std::vector<torch::Device> replicas;  // dist.strategy dp: every visible GPU, or the CPU
};

// UsageError when train.device cuda finds none, or a rank's GPUs are not all visible.
Devices chooseDevices(const config::ExperimentConfig& cfg, const distributed::Runtime& rt);

// Makes `d` this process's current CUDA device (no-op on the CPU): what is created without an
// explicit device then lands there, and each rank opens its CUDA context on its own GPU only.
void bindDevice(torch::Device d);

// Moves the model to its device, or its stages to theirs.
void placeModel(models::Classifier& model, const config::ModelConfig& m, const Devices& d);

// The forward pass: plain, or (dist.strategy dp) through replicas on every device.
torch::Tensor forward(models::Classifier& model, const torch::Tensor& x, const Devices& d);

}  // namespace ltrain::compute
