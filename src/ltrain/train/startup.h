// The start-up protocol between ranks. Rank 0 alone decides about and prepares the run directory;
// the others follow its decision, and a failure there reaches them at once rather than after
// dist.timeout_s. Rank 0 chooses the checkpoint to resume from (past corrupt ones), and every rank
// loads that same one.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <optional>
#include <string>

#include "ltrain/checkpoint/checkpoint.h"
#include "ltrain/config/load.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/train/reporter.h"
#include "ltrain/train/run_dir.h"

namespace ltrain::train {

struct TrainRequest {
  std::string output_dir;  // --output-dir; empty: <output_dir>/<name>
  bool overwrite = false;
};

// UsageError on every rank when rank 0 cannot prepare it.
RunDir agreeOnRunDir(const config::LoadedConfig& lc, const TrainRequest& req,
                     const distributed::Runtime& rt, distributed::ProcessGroup* pg);

// Loads the chosen checkpoint (its path) into the model, the optimizer and the run's other
// stateful components; UsageError when it is unusable, nothing then changed.
using LoadCheckpoint = std::function<void(const std::string& path)>;

// Rank 0 loads the newest usable checkpoint, then every other rank the one it chose. False: a
// fresh start, nothing loaded.
bool resumeIfAny(RunDir& run, const LoadCheckpoint& load, const distributed::Runtime& rt,
                 distributed::ProcessGroup* pg, Reporter& reporter);

}  // namespace ltrain::train
