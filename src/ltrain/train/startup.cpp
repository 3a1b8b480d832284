#include "ltrain/train/startup.h"

#include <fmt/format.h>

#include <cstring>

#include "ltrain/common/errors.h"

namespace ltrain::train {
namespace {

constexpr const char* kRankZeroFailed =
    "\x01"
    "failed: ";  // a prefix no path starts with

// The first of the run's candidate checkpoints that loads, newest first.
void loadNewestReadable(RunDir& run, const LoadCheckpoint& load, Reporter& reporter) {
  std::vector<std::string> candidates{*run.resume_from};
  candidates.insert(candidates.end(), run.fallbacks.begin(), run.fallbacks.end());
  for (size_t i = 0; i < candidates.size(); ++i) {
    try {
      load(candidates[i]);
      run.resume_from = candidates[i];
      return;
    } catch (const UsageError& e) {
      if (i + 1 == candidates.size()) throw;
      reporter.warn(fmt::format("{}; resuming from the previous checkpoint, {}", e.what(),
                                candidates[i + 1]));
    }
  }
}

}  // namespace

RunDir agreeOnRunDir(const config::LoadedConfig& lc, const TrainRequest& req,
                     const distributed::Runtime& rt, distributed::ProcessGroup* pg) {
  RunDir run;
  if (rt.isMain()) {
    try {
      // --overwrite is for the first attempt: a restarted job resumes what it has written.
      run = prepareRunDir(lc, req.output_dir, req.overwrite && rt.restart_count == 0, true,
                          rt.distributed() ? "logs" : "");
    } catch (const UsageError& e) {
      if (pg) pg->broadcastString("run_dir", std::string(kRankZeroFailed) + e.what());
      throw;
    }
  }
  if (pg) {
    run.path = pg->broadcastString("run_dir", run.path);
    if (run.path.rfind(kRankZeroFailed, 0) == 0)
      throw UsageError("rank 0 could not prepare the run directory: " +
                       run.path.substr(std::strlen(kRankZeroFailed)));
  }
  return run;
}

bool resumeIfAny(RunDir& run, const LoadCheckpoint& load, const distributed::Runtime& rt,
                 distributed::ProcessGroup* pg, Reporter& reporter) {
  if (rt.isMain() && run.resume_from) {
    try {
      loadNewestReadable(run, load, reporter);
    } catch (const UsageError& e) {
      if (pg) pg->broadcastString("resume_from", std::string(kRankZeroFailed) + e.what());
      throw;
    }
  }
  if (pg) {
    const std::string chosen = pg->broadcastString("resume_from", run.resume_from.value_or(""));
    if (chosen.rfind(kRankZeroFailed, 0) == 0)
      throw UsageError("rank 0 could not resume: " + chosen.substr(std::strlen(kRankZeroFailed)));
    if (!rt.isMain() && !chosen.empty()) {
      run.resume_from = chosen;
      load(chosen);
    }
  }
  return run.resume_from.has_value();
}

}  // namespace ltrain::train
