#include "ltrain/train/mfu.h"

#include <utility>
#include <vector>

#include "ltrain/cuda/plugin.h"
#include "ltrain/models/spec.h"

namespace ltrain::train {

double flopsPerToken(const config::ModelConfig& m, int64_t params, int64_t vocab) {
  const auto* spec = models::findModelSpec(m.name);
  return spec && spec->flops_per_token ? spec->flops_per_token(m, params, vocab) : 0;
}

double knownPeakFlops(const std::string& name) {
  // NVIDIA's data sheets, dense (no sparsity) bf16 tensor-core FLOP/s; longer names first, so
  // that "H100 PCIe" is not taken for the SXM part.
  static const std::vector<std::pair<std::string, double>> table{
      {"GB200", 2500e12},    {"B200", 2250e12},    {"H200", 989e12}, {"GH200", 989e12},
      {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989e12}, {"H800", 989e12},
      {"A100", 312e12},      {"A800", 312e12},     {"L40S", 362e12}, {"L40", 181e12},
      {"L4", 121e12},        {"A10G", 125e12},     {"A10", 125e12},  {"RTX 4090", 165e12},
      {"RTX 3090", 71e12},   {"V100", 125e12}};
  for (const auto& [key, flops] : table)
    if (name.find(key) != std::string::npos) return flops;
  return 0;
}

double peakFlops(const config::TrainConfig& t, const std::string& device_type, int device_index) {
  if (t.peak_flops > 0) return t.peak_flops;
  const auto* cuda = cuda::plugin();
  if (device_type == "cuda" && cuda) return knownPeakFlops(cuda->device_name(device_index));
  return 0;
}

}  // namespace ltrain::train
