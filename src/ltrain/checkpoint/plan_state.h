// What a checkpoint reads from and writes into the parallel plan, whatever its strategy: the
// optimizer state (whole or by ranges) and, where parameters are sharded, each rank's units. The
// plans (distributed/parallel_plan.h) implement it; checkpoint/ needs nothing else of them.
#pragma once
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ltrain::checkpoint {

// What one rank holds of the model and the optimizer, unit by unit, where each rank writes its
// own part of a checkpoint (checkpoint/sharded_checkpoint.h).
struct UnitShard {
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // where it starts in the unit's flat layout
  };
  std::vector<Param> params;
  int64_t padded = 0;    // the flat layout's length, a multiple of the world size
  int64_t begin = 0;     // where this rank's slice starts in it
  torch::Tensor values;  // the slice of the parameters
  int64_t optimizer_step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> state;  // the slice of each state tensor
};

// The plan's part of a checkpoint: the optimizer state (whole or sharded) and, where the
// parameters are sharded, each rank's slices. The checkpoint module reads it without knowing
// which strategy made it.
class PlanState {
 public:
  virtual ~PlanState() = default;
  // The optimizer state in a single process's form, so that a run resumes under any strategy
  // and world size. Collective: every rank calls it; `write` runs on rank 0 with an optimizer
  // over the whole model holding the whole state.
  virtual void saveWholeOptimizer(const std::function<void(torch::optim::Optimizer&)>& write) = 0;
  // After every rank loaded the same checkpoint into `whole` (an optimizer over the whole model,
  // its state on the CPU): each rank takes its part, next to its parameters.
  virtual void loadWholeOptimizer(const torch::optim::Optimizer& whole) = 0;
  // A checkpoint read by element ranges (a sharded one): of parameter `param` (by name), its
  // optimizer states' names and step, and elements [begin, end) of one state, 1-d.
  struct RangeSource {
    std::function<std::vector<std::string>(const std::string& param)> state_names;
    std::function<int64_t(const std::string& param)> step;
    std::function<torch::Tensor(const std::string& param, const std::string& state, int64_t begin,
                                int64_t end)>
        read;
  };
  // Where the parameters are sharded: each rank reads the optimizer state of its own slices only.
  virtual void loadOptimizerRanges(const RangeSource& /*source*/) {
    throw std::logic_error("this plan reads no optimizer state by ranges");
  }
  // Non-empty where the parameters are sharded: this rank's units, and each rank then writes
  // its own part of a checkpoint.
  virtual std::vector<UnitShard> unitShards() { return {}; }
  // Collective, where unitShards() is not empty: unit by unit, in its order, `fn(u, params)` on
  // the main rank with unit u's parameters gathered onto the host, in UnitShard::params' order.
  virtual void forEachUnitOnHost(
      bool /*main*/, const std::function<void(size_t, const std::vector<torch::Tensor>&)>& /*fn*/) {
  }
};

}  // namespace ltrain::checkpoint
