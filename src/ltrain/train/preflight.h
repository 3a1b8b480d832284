// Checks of a config that need its model built (not its data loaded): the pipeline's stage
// count against the model's layers. `ltrain config` runs them as `ltrain train` does, so each of
// these errors reads the same from both.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ltrain/config/load.h"

namespace ltrain::train {

// One example's shape and the class count as the config describes them, without reading the
// data (a table's feature count from its header line); nullopt where only the data would say.
struct DataShape {
  std::vector<int64_t> example;
  int64_t classes = 0;  // 0: only the data says (a text's vocabulary)
  bool tokens = false;
};
std::optional<DataShape> describeData(const config::ExperimentConfig& cfg);

// UsageError as `ltrain train` would raise it.
void preflight(const config::LoadedConfig& lc);

// "file:line: " of the layer graph's entry written on `line` (for its errors).
std::string layerWhere(const config::LoadedConfig& lc, int line);

// `ltrain config --model`: the model's summary for the data's shape (the data is read when the
// config alone does not say it: a table's classes, a text's vocabulary).
std::string describeModel(const config::LoadedConfig& lc);

// The pipeline rule alone, on a built model's layer count.
void checkPipelineStages(int64_t layers, int64_t stages);

}  // namespace ltrain::train
