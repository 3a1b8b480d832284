#include "ltrain/train/loss.h"

#include <torch/torch.h>

namespace ltrain::train {

torch::Tensor crossEntropy(const torch::Tensor& out, const torch::Tensor& targets,
                           torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction) {
  namespace F = torch::nn::functional;
  const auto opts = F::CrossEntropyFuncOptions().reduction(reduction);
  // A pipeline's output is on its last stage's device.
  const auto t = targets.device() == out.device() ? targets : targets.to(out.device());
  if (out.dim() == 3) return F::cross_entropy(out.flatten(0, 1), t.flatten(), opts);
  return F::cross_entropy(out, t, opts);
}

}  // namespace ltrain::train
