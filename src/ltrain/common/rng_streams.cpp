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

void setGeneratorState(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Refused unless it is a state of this generator's size: torch's own check aborts on some.
void checkGeneratorState(at::Generator gen, const torch::Tensor& state, const char* name) {
  const int64_t bytes = generatorState(gen).numel();
  if (state.scalar_type() != torch::kByte || state.numel() != bytes)
    throw std::runtime_error(
        fmt::format("its '{}' is not a generator state of {} bytes", name, bytes));
}

}  // namespace

StateDict RngStreams::state() const {
  StateDict s{{"rng_cpu", generatorState(at::detail::getDefaultCPUGenerator())}};
  if (device_.is_cuda())
    s.emplace_back("rng_cuda", generatorState(at::globalContext().defaultGenerator(device_)));
  return s;
}

void RngStreams::check(const StateDict& s) const {
  const auto* cpu = findState(s, "rng_cpu");
  if (!cpu) throw std::runtime_error("it has no generator state ('rng_cpu')");
  checkGeneratorState(at::detail::getDefaultCPUGenerator(), *cpu, "rng_cpu");
  if (const auto* cuda = device_.is_cuda() ? findState(s, "rng_cuda") : nullptr)
    checkGeneratorState(at::globalContext().defaultGenerator(device_), *cuda, "rng_cuda");
}

void RngStreams::load(const StateDict& s) {
  setGeneratorState(at::detail::getDefaultCPUGenerator(), *findState(s, "rng_cpu"));
  if (const auto* cuda = device_.is_cuda() ? findState(s, "rng_cuda") : nullptr)
    setGeneratorState(at::globalContext().defaultGenerator(device_), *cuda);
}

}  // namespace ltrain
