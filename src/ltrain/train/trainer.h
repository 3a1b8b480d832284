// The training run: build data and model, loop over epochs and steps with the configured optimizer
// and schedule, evaluate, checkpoint, and write metrics and the summary into the run directory.
#pragma once
#include <string>

#include "ltrain/config/load.h"
#include "ltrain/dist/runtime.h"

namespace ltrain::train {

struct TrainRequest {
  std::string output_dir;  // --output-dir; empty: <output_dir>/<name>
  bool overwrite = false;
};

struct Summary {
  std::string status;
  double test_accuracy = 0, test_loss = 0, train_loss = 0;
  int64_t steps = 0, epochs = 0;
  double wall_s = 0, samples_per_s = 0;
  int64_t world_size = 1;
  std::string run_dir;
  int stop_signal = 0;  // SIGTERM/SIGINT stopped the run after step `steps` (exit 128 + signal)
  bool language_model = false;  // test_* are then the text's validation split, per token
};

struct EvalSummary {
  double test_accuracy = 0, test_loss = 0;
  int64_t examples = 0;
  bool language_model = false;  // per-token loss on the text's validation split
};

// `ltrain eval`: the config's model with weights from a checkpoint (.pt) or a .safetensors file,
// evaluated on the test split. UsageError for a missing or mismatched file.
EvalSummary evaluateWeights(const config::LoadedConfig& lc, const std::string& weights);

// Throws UsageError for bad data, shapes or run directories (before anything is written),
// std::exception for failures during training (summary.json then says "failed").
Summary runTraining(const config::LoadedConfig& lc, const TrainRequest& req,
                    const dist::Runtime& rt);

}  // namespace ltrain::train
