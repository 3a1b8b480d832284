// Turns a YAML file plus overrides into a validated ExperimentConfig (defaults < base files <
// file < overrides), remembering where each value came from. A file may name `base: other.yaml`
// (relative to itself) and override its keys, chains allowed; overrides are Hydra's KEY=VALUE,
// +KEY=VALUE (a key the files do not set) and ~KEY (back to the default).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "ltrain/config/experiment_config.h"

namespace ltrain::config {

struct LoadedConfig {
  ExperimentConfig cfg;
  std::string file;
  std::vector<std::string> overrides;
  std::map<std::string, std::string> sources;  // path -> "default" | "file:line" | "override ..."
  std::map<std::string, bool> explicitly_set;  // paths a file or an override set
  // "file:line: " of where `path` was set, or "" for a default: the prefix of its errors.
  std::string where(const std::string& path) const {
    return explicitly_set.count(path) ? sources.at(path) + ": " : "";
  }
};

// Throws UsageError with one line naming the key, the file and line, and what was expected.
LoadedConfig loadConfig(const std::string& file, const std::vector<std::string>& overrides);
// Same, from YAML text already in memory (`origin` names it in messages).
LoadedConfig loadConfigText(const std::string& text, const std::string& origin,
                            const std::vector<std::string>& overrides);

// "optimizer.lr=0.01" -> {"optimizer.lr", node 0.01}; the value is parsed as YAML ([512,256] is a
// list).
std::pair<std::string, YAML::Node> parseOverride(const std::string& text);

// The known option path closest to an unknown key, or "" when nothing is close.
std::string closestKey(const std::string& key);

}  // namespace ltrain::config
