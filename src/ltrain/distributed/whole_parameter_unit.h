// A sharded checkpoint's unit of one whole parameter (checkpoint/sharded_checkpoint.h), as the
// plans whose ranks hold parts of the model write it (tensor and expert parallelism): the
// parameter under its whole name and shape, of which this rank writes its 1/world, values and
// optimizer state alike.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ltrain/checkpoint/plan_state.h"
#include "ltrain/distributed/optimizer_state.h"

namespace ltrain::distributed {

// `value` and `state`'s tensors are the whole parameter's (shape `shape`).
inline checkpoint::UnitShard wholeParameterUnit(const std::string& name,
                                                const std::vector<int64_t>& shape,
                                                const torch::Tensor& value, const ParamState& state,
                                                int64_t rank, int64_t world) {
  checkpoint::UnitShard u;
  const int64_t numel = c10::multiply_integers(shape);
  u.params.push_back({name, shape, 0});
  u.padded = (numel + world - 1) / world * world;
  u.begin = rank * (u.padded / world);
  // This rank's [begin, begin + padded / world) of a whole tensor flattened, zero beyond its end.
  auto slice = [&](const torch::Tensor& whole) {
    const int64_t n = u.padded / world;
    auto flat = whole.reshape(-1);
    auto out = torch::zeros({n}, flat.options());
    const int64_t have = std::clamp(flat.numel() - u.begin, int64_t{0}, n);
    if (have > 0) out.narrow(0, 0, have).copy_(flat.narrow(0, u.begin, have));
    return out;
  };
  u.values = slice(value);
  if (!state.tensors.empty()) {
    u.optimizer_step = state.step;
    for (const auto& [s, t] : state.tensors) u.state.emplace_back(s, slice(t));
  }
  return u;
}

}  // namespace ltrain::distributed
