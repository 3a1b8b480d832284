// A training run: what it needs is built and agreed between ranks at start-up, then the epoch and
// step schedule runs TrainStep (step.h), evaluates, checkpoints and reports, until the last step,
// a stop signal, or a failure.
#pragma once
#include <string>

#include "ltrain/config/load.h"
#include "ltrain/distributed/runtime.h"
#include "ltrain/train/startup.h"

namespace ltrain::train {

struct Summary {
  std::string status;
  double test_accuracy = 0, test_loss = 0, train_loss = 0;
  int64_t steps = 0, epochs = 0;
  double wall_s = 0, samples_per_s = 0;
  int64_t world_size = 1;
  std::string run_dir;
  int stop_signal = 0;  // SIGTERM/SIGINT stopped the run after step `steps` (exit 128 + signal)
  bool language_model = false;  // test_* are then the text's validation split, per token
  bool preference = false;      // test_* are DPO's loss and reward accuracy on the validation pairs
};

// Throws UsageError for bad data, shapes or run directories (before anything is written),
// std::exception for failures during training (summary.json then says "failed").
Summary runTraining(const config::LoadedConfig& lc, const TrainRequest& req,
                    const distributed::Runtime& rt);

}  // namespace ltrain::train
