// A few float scalars of the caller's that ride on a plan's collectives and come back summed over
// the ranks (the trainer's stop vote): each strategy carries them on whichever collective it runs
// anyway, and what they mean is the caller's.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

namespace ltrain::distributed {

struct ExtraScalars {
  size_t count = 0;
  std::function<void(float*)> fill;  // writes this rank's `count` values

  // This rank's values written into `out` (`count` elements; zeros where nothing fills them),
  // each by fill_ rather than a copy from the host: on CUDA a kernel, no synchronisation.
  void writeInto(const torch::Tensor& out) const {
    std::vector<float> v(count, 0.f);
    if (fill && count > 0) fill(v.data());
    for (size_t i = 0; i < count; ++i) out[static_cast<int64_t>(i)].fill_(v[i]);
  }
  // The same as a new 1-d tensor of `options`.
  torch::Tensor values(const torch::TensorOptions& options) const {
    auto t = torch::empty({static_cast<int64_t>(count)}, options);
    writeInto(t);
    return t;
  }
};

}  // namespace ltrain::distributed
