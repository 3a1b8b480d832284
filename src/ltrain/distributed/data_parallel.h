// dist.strategy dp: one process drives several devices, as torch.nn.DataParallel. Each forward
// replicates the model onto every device, cuts the batch into one slice per replica, runs the
// replicas on threads of their own and gathers the outputs on the first device; the backward
// pass reaches the original parameters through the replicas' gradient edges.
// Written here rather than with LibTorch's data_parallel: its replica threads carry none of the
// caller's thread-local state (autocast, grad mode), so replicas after the first ran in fp32 and
// recorded graphs under NoGradGuard; and its replicas are copies, so batch norm's running
// statistics never came back. Here each thread runs under the caller's state, and replica 0's
// buffers are copied back into the model, as PyTorch's replica 0 (which shares them) leaves them.
#pragma once
#include <torch/types.h>

#include <vector>

#include "ltrain/models/model.h"

namespace ltrain::distributed {

torch::Tensor dataParallelForward(models::Classifier& model, const torch::Tensor& x,
                                  const std::vector<torch::Device>& devices);

}  // namespace ltrain::distributed
