// The training and evaluation loss: cross-entropy of classifier outputs [B, K] against class
// targets [B], or of language-model outputs [B, T, V] against next tokens [B, T] (per token, as
// PyTorch's recipes compute it on logits.view(-1, V)).
#pragma once
#include <torch/nn/functional/loss.h>

namespace ltrain::train {

torch::Tensor crossEntropy(
    const torch::Tensor& out, const torch::Tensor& targets,
    torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction = torch::kMean);

}  // namespace ltrain::train
