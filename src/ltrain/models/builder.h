// A model family's builder, the torch half of its folder (models/<family>/): its plain LibTorch
// module from the config. The list is models/families.def, as for the specs (spec.h).
#pragma once
#include <memory>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/layerwise.h"
#include "ltrain/models/model.h"

namespace ltrain::models {

struct ModelBuilder {
  // The model for inputs of `input_shape` and `num_classes` outputs (a language model's: its
  // vocabulary); `tokens`: the inputs are token ids. Null for the transformer families, which
  // give their layers instead and are built whole or deferred from them (layerwise.h).
  Classifier (*build)(const config::ModelConfig&, const std::vector<int64_t>& input_shape,
                      int64_t num_classes, bool tokens) = nullptr;
  // A transformer family's layers, plain: dist.tensor_parallel splits them by the spec's plan
  // (models/parallelize.h).
  Layerwise (*layers)(const config::ModelConfig&, const std::vector<int64_t>& input_shape,
                      int64_t vocab) = nullptr;
};

// The builder of model.name `name`; UsageError naming the families for another name.
const ModelBuilder& modelBuilder(const std::string& name);

}  // namespace ltrain::models
