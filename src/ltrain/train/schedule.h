// Learning rate at each optimizer step: linear warm-up, then constant, step, cosine or linear
// decay, or wsd (warm-up, stable, then a linear decay over the last decay_fraction of the run).
// Written here because LibTorch's C++ API has no cosine, linear or warm-up schedulers.
#pragma once
#include <cstdint>

#include "ltrain/config/experiment_config.h"

namespace ltrain::train {

// `step` is the 0-based index of the optimizer step about to run; `total_steps` the run's length.
double learningRate(const config::OptimizerConfig& opt, const config::SchedulerConfig& sched,
                    int64_t step, int64_t total_steps);

}  // namespace ltrain::train
