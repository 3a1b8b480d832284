// A piece of training state that saves and loads itself: a checkpoint is the set of them
// (checkpoint/checkpoint.h), written whole or sharded by a module that does not know what each
// one is. The loop's position, the loss scaler, the loss tally and the random generators are
// such components; the model and the optimizer (the parallel plan's state) have their own forms.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ltrain {

// One component's state: named tensors, scalars as 0-d ones. The names are unique across a
// checkpoint: they are its keys there.
using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;

class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual StateDict state() const = 0;
  // Whether load(s) would take `s`: std::runtime_error naming an entry it cannot do without, or
  // one it cannot use. Changes nothing: a checkpoint checks every component before it loads any.
  virtual void check(const StateDict& /*s*/) const {}
  // `s`: those of this component's names that the checkpoint holds (one written before a name
  // existed lacks it), already check()ed.
  virtual void load(const StateDict& s) = 0;
};

// A 0-d int64 or double tensor on the CPU.
torch::Tensor stateScalar(int64_t v);
torch::Tensor stateScalar(double v);
// The entry named `name`, or null.
const torch::Tensor* findState(const StateDict& s, const std::string& name);
// Its value; `fallback` when absent, std::runtime_error when absent and `required`.
int64_t stateInt(const StateDict& s, const std::string& name, int64_t fallback,
                 bool required = false);
double stateDouble(const StateDict& s, const std::string& name, double fallback,
                   bool required = false);

}  // namespace ltrain
