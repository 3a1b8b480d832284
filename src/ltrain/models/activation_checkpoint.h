// Activation checkpointing (train.activation_checkpointing): a run of layers whose forward keeps
// none of its activations and is recomputed during backward. LibTorch has no
// torch.utils.checkpoint; this is its reentrant form as an autograd node: the forward runs without
// grad, backward reruns it with grad, with the random generators (CPU, and the input's GPU) and
// autocast as the forward had them, so dropout draws repeat and the gradients are the plain run's,
// then back-propagates through the rerun (the parameters' gradients accumulate there, and DDP's
// hooks see them as in a plain backward).
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

namespace ltrain::models {

// Marks the layers a model repeats (a transformer block, a residual block): the units
// activation checkpointing recomputes.
class RepeatedBlock {
 public:
  virtual ~RepeatedBlock() = default;
};

using Segment = std::function<torch::Tensor(const torch::Tensor&)>;

// segment(x), its activations freed. `buffers` (batch norm's running statistics) are put back as
// the forward left them after the rerun, which would otherwise update them a second time.
torch::Tensor checkpointed(Segment segment, const torch::Tensor& x,
                           std::vector<torch::Tensor> buffers);

}  // namespace ltrain::models
