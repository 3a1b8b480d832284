// The random generators a run draws from (the CPU's, and the device's of a CUDA run, where
// dropout draws), as a component of the checkpoint: a resumed run draws what it would have.
#pragma once
#include <torch/types.h>

#include "ltrain/common/stateful.h"

namespace ltrain {

class RngStreams final : public Stateful {
 public:
  explicit RngStreams(torch::Device device) : device_(device) {}
  StateDict state() const override;
  // Each generator's state must be one of its size.
  void check(const StateDict& s) const override;
  // A CPU run's checkpoint resumed on a GPU (or the reverse) keeps the seeded device state.
  void load(const StateDict& s) override;

 private:
  torch::Device device_;
};

}  // namespace ltrain
