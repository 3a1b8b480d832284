// A trained model ready to run: what `ltrain eval` and `ltrain predict` start from.
#pragma once
#include <string>

#include "ltrain/compute/devices.h"
#include "ltrain/config/load.h"
#include "ltrain/data/dataset.h"
#include "ltrain/models/model.h"

namespace ltrain::inference {

// The config's model with weights from a checkpoint (.pt, whatever device wrote it) or a
// .safetensors file, on the config's device in eval mode, and the dataset it was built for (its
// shapes, classes and statistics). UsageError for a missing or mismatched file.
struct TrainedClassifier {
  data::Splits splits;
  models::Classifier model{nullptr};
  compute::Devices devices;
};
TrainedClassifier loadTrainedClassifier(const config::LoadedConfig& lc, const std::string& weights);

}  // namespace ltrain::inference
