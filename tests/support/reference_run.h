// Test support: ltrain beside the Python reference (bench/reference/train_ref.py) on the same
// config and initial weights, each with `processes` processes (Python's under the real torchrun
// when there are several), and their training losses step by step.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ltrain::test {

struct SideBySide {
  std::map<int, double> reference, ltrain;  // the train loss of each logged step
  // The largest |reference - ltrain| / |reference| over the reference's steps; infinite when
  // ltrain misses one of them.
  double worstRelative() const;
  // "worst relative loss difference W; step 1: A vs B, step N: A vs B", for a failing check.
  std::string describe() const;
};

// std::runtime_error with the failing side's command line and output. `ltrain_overrides`
// (key=value) go to ltrain alone: another strategy (dist.zero=3) to train the reference's way.
SideBySide trainBesideReference(const std::string& config, const std::string& init_weights,
                                int processes, const std::string& reference_out,
                                const std::string& ltrain_out,
                                const std::vector<std::string>& ltrain_overrides = {});

}  // namespace ltrain::test
