// Sweeps: one base config, swept parameters, a trial per combination (or random draw), each in its
// own run directory <sweep dir>/<NNN>-<short overrides>/, K at a time, each with its own devices
// and ports. A finished trial is skipped when the sweep runs again and an unfinished one resumes.
// At the end: sweep_summary.csv and sweep_summary.md (sorted by the metric), printed too.
#pragma once
#include <string>
#include <vector>

#include "ltrain/sweep/params.h"

namespace ltrain::sweep {

struct SweepSpec {
  std::string base;                    // the base experiment config
  std::vector<std::string> overrides;  // fixed KEY=VALUE for every trial
  std::vector<Param> params;
  std::string dir;  // the sweep directory
  int64_t parallel = 1;
  std::string metric = "test_accuracy";
  std::string mode = "max";  // max | min
  int64_t samples = 0;       // random search: trials to draw
  uint64_t seed = 0;
  std::string nproc_per_node = "1";  // processes per trial
  std::string source;                // the sweep file, or "" for train -m
};

// A sweep file: base, overrides, params, and sweep: {name, output_dir, parallel, metric, mode,
// samples, seed, nproc_per_node}. UsageError naming the file, line and key.
SweepSpec loadSweepFile(const std::string& path, const std::string& output_dir_flag);

// Runs the sweep with `ltrain` at `self_exe` for each trial; returns the exit code: 0 when every
// trial completed, 1 when any failed, 128 + signal when stopped by SIGINT/SIGTERM (the running
// trials checkpoint first). UsageError before anything runs for a trial config that is invalid
// or a directory that holds another sweep.
int runSweep(const SweepSpec& spec, const std::string& self_exe);

// `ltrain runs DIR`: every run directory below DIR with its status and key metrics, as a table.
// With `html` not empty, also that page (train/run_report.h: writeRunsReport), every run linked
// to its report.html; a file there that ltrain did not write is refused, and kept.
std::string listRuns(const std::string& dir, const std::string& html = "");

}  // namespace ltrain::sweep
