#include "ltrain/common/rng_streams.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <mutex>
#include <stdexcept>

namespace ltrain {
namespace {

torch::Tensor generatorState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// Refused unless it is a state of this generator's size: torch's own check aborts on some.
void setGeneratorState(at::Generator gen, const torch::Tensor& state, const char* name) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  const int64_t bytes = gen.get_state().numel();
  if (state.scalar_type() != torch::kByte || state.numel() != bytes)
    throw std::runtime_error(
        fmt::format("its '{}' is not a generator state of {} bytes", name, bytes));
  gen.set_state(state);
}

}  // namespace

StateDict RngStreams::state() const {
  StateDict s{{"rng_cpu", generatorState(at::detail::getDefaultCPUGenerator())}};
  if (device_.is_cuda())
    s.emplace_back("rng_cuda", generatorState(at::globalContext().defaultGenerator(device_)));
  return s;
}

void RngStreams::load(const StateDict& s) {
  const auto* cpu = findState(s, "rng_cpu");
  if (!cpu) throw std::runtime_error("it has no generator state ('rng_cpu')");
  const auto* cuda = device_.is_cuda() ? findState(s, "rng_cuda") : nullptr;
  setGeneratorState(at::detail::getDefaultCPUGenerator(), *cpu, "rng_cpu");
  if (cuda) setGeneratorState(at::globalContext().defaultGenerator(device_), *cuda, "rng_cuda");
}

}  // namespace ltrain
