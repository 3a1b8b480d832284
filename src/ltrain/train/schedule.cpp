#include "ltrain/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace ltrain::train {

double learningRate(const config::OptimizerConfig& opt, const config::SchedulerConfig& s,
                    int64_t step, int64_t total_steps) {
  const double peak = opt.lr;
  if (step < s.warmup_steps) return peak * static_cast<double>(step + 1) / s.warmup_steps;
  const int64_t after = step - s.warmup_steps;
  const int64_t span = std::max<int64_t>(1, total_steps - s.warmup_steps - 1);
  const double t = std::min(1.0, static_cast<double>(after) / span);
  if (s.name == config::SchedulerName::kStep)
    return peak * std::pow(s.gamma, static_cast<double>(after / s.step_size));
  if (s.name == config::SchedulerName::kCosine)
    return s.min_lr + (peak - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  if (s.name == config::SchedulerName::kLinear) return peak + (s.min_lr - peak) * t;
  if (s.name == config::SchedulerName::kWsd) {
    // Stable at the peak, then the last decay_fraction of the run falls linearly, reaching min_lr
    // at the last step.
    const auto decay = std::max<int64_t>(
        1, static_cast<int64_t>(std::llround(s.decay_fraction * static_cast<double>(total_steps))));
    const int64_t start = total_steps - decay;
    if (step < start) return peak;
    return peak + (s.min_lr - peak) * static_cast<double>(step - start + 1) / decay;
  }
  return peak;
}

}  // namespace ltrain::train
