// Evaluation on the held-out split (the test set; a language model's validation text): loss and
// accuracy (next-token accuracy for language models), each rank on its own contiguous shard,
// reduced over ranks. Also `ltrain eval`: saved weights evaluated without a run directory.
#pragma once
#include <string>

#include "ltrain/compute/devices.h"
#include "ltrain/config/load.h"
#include "ltrain/data/dataset.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/models/model.h"
#include "ltrain/train/dpo.h"

namespace ltrain::train {

struct EvalResult {
  // Per example, or per token for language models; preference pairs: DPO's loss per pair, and
  // the share of pairs whose chosen answer gets the higher reward (TRL's rewards/accuracies).
  double loss = 0, accuracy = 0;
};

// Collective when `pg` is set: every rank calls it. `dpo`: preference pairs, scored by DPO.
EvalResult evaluate(models::Classifier& model, const data::Dataset& ds, int64_t batch_size,
                    config::Precision precision, const compute::Devices& devices,
                    distributed::ProcessGroup* pg, Dpo* dpo = nullptr);

// What the held-out split is called in logs and metrics: "val" for text, "test" otherwise.
const char* heldOutName(const data::Dataset& ds);
// Whether the split is scored per token (perplexity, next-token accuracy): not preference pairs.
inline bool languageModel(const data::Dataset& ds) {
  return ds.tokens && !ds.pairs;
}

struct EvalSummary {
  double test_accuracy = 0, test_loss = 0;
  int64_t examples = 0;
  bool language_model = false;  // per-token loss on the text's validation split
  bool preference = false;      // DPO's loss and reward accuracy on the validation pairs
};

// `ltrain eval`: the config's model with weights from a checkpoint (.pt, whatever device wrote
// it) or a .safetensors file, on the test split. UsageError for a missing or mismatched file.
EvalSummary evaluateWeights(const config::LoadedConfig& lc, const std::string& weights);

}  // namespace ltrain::train
