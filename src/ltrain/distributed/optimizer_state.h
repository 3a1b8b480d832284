// LibTorch optimizer state per parameter as named tensors, for the optimizers ltrain makes (SGD,
// Adam, AdamW): ZeRO moves it into and out of slices, checkpoints move it between devices.
#pragma once
#include <torch/optim/optimizer.h>

#include <string>
#include <utility>
#include <vector>

namespace ltrain::distributed {

struct ParamState {
  int64_t step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // in a fixed order
};

// False when `opt` holds no state for `p` (no step yet, or a parameter it never updated).
bool readParamState(const torch::optim::Optimizer& opt, const torch::Tensor& p, ParamState& out);
void writeParamState(torch::optim::Optimizer& opt, const torch::Tensor& p, const ParamState& in);

// Bytes of per-parameter state `opt` holds (SGD's momentum, Adam's moments).
int64_t optimizerStateBytes(const torch::optim::Optimizer& opt);

// Copies `from`'s state into `to` (optimizers of the same type over the same parameters), each
// tensor moved next to its parameter: a checkpoint is read on the CPU whatever device saved it,
// and the state then follows the parameters to theirs.
void copyStateNextToParameters(const torch::optim::Optimizer& from, torch::optim::Optimizer& to);

}  // namespace ltrain::distributed
