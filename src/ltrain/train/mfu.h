// Model FLOPs utilisation, as PaLM (appendix B) and nanoGPT estimate it: a token costs
// 6 N + 12 L H Q T FLOPs forward and backward (N the parameters that multiply, L layers, H heads
// of size Q, T the context), and MFU is tokens/s times that over the devices' peak: the bf16 dense
// peak of a known GPU, or train.peak_flops.
#pragma once
#include <cstdint>
#include <string>

#include "ltrain/config/experiment_config.h"

namespace ltrain::train {

// FLOPs per trained token of a gpt or llama of `params` parameters; 0 for other models.
double flopsPerToken(const config::ModelConfig& m, int64_t params, int64_t vocab);
// The dense bf16 peak FLOP/s of a GPU named `name` (cudaDeviceProp::name), 0 when unknown.
double knownPeakFlops(const std::string& name);
// train.peak_flops, else the table's for `device` when it is a GPU; 0: no MFU to report.
double peakFlops(const config::TrainConfig& t, const std::string& device_type, int device_index);

}  // namespace ltrain::train
