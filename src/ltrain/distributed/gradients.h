// Arithmetic over a set of gradients that may sit on several devices (a pipeline's stages):
// unscaling with the finiteness test, the global norm in double, scaling. One fused pass per
// device where ATen has one.
#pragma once
#include <torch/types.h>

#include <vector>

namespace ltrain::distributed {

// The sum of the squares of `g`'s elements, accumulated in double without a double copy of `g`:
// clipping sums these over whole gradients or ZeRO slices, and in double both give the same
// clip factor.
torch::Tensor sumOfSquares(const torch::Tensor& g);

// Multiplies every tensor by `factor` (a 1-element tensor; undefined: 1) and returns a
// 1-element float tensor on the first tensor's device that is 1 when any element is inf or nan
// (torch.amp's found_inf), else 0. Nothing is read on the host.
torch::Tensor unscaleAndFindInf(const std::vector<torch::Tensor>& grads,
                                const torch::Tensor& factor);

// The summed squares of all `grads` in double, a 0-d tensor on the first one's device.
torch::Tensor sumOfAllSquares(const std::vector<torch::Tensor>& grads);
// The same, each tensor's squares times its weight (tensor parallelism: 1/size for a parameter
// every rank of the group holds whole, so that summing over the group counts it once).
torch::Tensor sumOfAllSquares(const std::vector<torch::Tensor>& grads,
                              const std::vector<double>& weights);

// torch::nn::utils::clip_grad_norm_: scales by max_norm / (norm + 1e-6) when that is below 1,
// on the device. `norm` is the global norm (over every rank's slices for sharded gradients).
void clipToNorm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm,
                double max_norm);

// Bytes of the distinct storages behind `tensors` (undefined ones skipped): a gradient that is a
// view of its bucket counts once.
int64_t distinctStorageBytes(const std::vector<torch::Tensor>& tensors);

}  // namespace ltrain::distributed
