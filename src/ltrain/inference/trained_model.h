// A trained model ready to run: what `ltrain eval` and `ltrain predict` start from.
#pragma once
#include <functional>
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
// `at_start`, when given, sees the model as the run started (model.init_from, then
// finetune.adapter_from's adapter), before the weights replace it: DPO's reference is kept there.
TrainedClassifier loadTrainedClassifier(
    const config::LoadedConfig& lc, const std::string& weights,
    const std::function<void(models::Classifier&)>& at_start = {});

}  // namespace ltrain::inference
