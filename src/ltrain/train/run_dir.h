// The run directory: where a run's config, metrics, summary and checkpoints live, and the rules
// that keep an earlier run from being lost by mistake.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ltrain/config/load.h"
#include "ltrain/data/dataset.h"

namespace ltrain::train {

struct RunDir {
  std::string path;
  std::optional<std::string> resume_from;  // checkpoint to continue from
  std::vector<std::string> fallbacks;  // older checkpoints, newest first, if resume_from is corrupt
  std::string checkpoints() const { return path + "/checkpoints"; }
  std::string metrics() const { return path + "/metrics.jsonl"; }
  std::string summary() const { return path + "/summary.json"; }
};

// Decides the directory and whether to resume; with `create`, makes it and writes config.yaml and
// overrides.txt (rank 0 only), after emptying it first with `overwrite` (all but `keep`: the
// launcher's logs of this very run). Every check comes before anything is deleted. Throws
// UsageError for a finished run without `overwrite`, a resume checkpoint that is missing, or a
// directory that cannot be made.
RunDir prepareRunDir(const config::LoadedConfig& lc, const std::string& output_dir_flag,
                     bool overwrite, bool create, const std::string& keep = "");

// "completed", "failed", ... from summary.json, or "" when there is none.
std::string runStatus(const std::string& run_dir);

// What `ltrain generate` needs to turn tokens into text, written into the run directory: a text
// run's vocabulary.json, or a copy of the tokenizer.json beside token shards (nothing otherwise).
void saveVocabulary(const std::string& run_dir, const data::Splits& splits);

}  // namespace ltrain::train
