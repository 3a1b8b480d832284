// Renders configs for people: the resolved YAML that `ltrain config` prints and each run saves,
// and the Markdown reference page docs/config.md.
#pragma once
#include <string>

#include "ltrain/config/load.h"

namespace ltrain::config {

// Resolved config as YAML; model fields of other model families are left out.
std::string toYaml(const ExperimentConfig& cfg);
// Same, each value followed by a comment saying where it came from.
std::string toYamlExplained(const LoadedConfig& lc);
// docs/config.md: every option with its type, default, constraints and help.
std::string referenceMarkdown();
// One line per option, "path (type, default X): help", for --help.
std::string optionSummary();

}  // namespace ltrain::config
