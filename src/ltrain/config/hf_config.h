// model.init_from naming a Hugging Face model directory: its config.json fills the architecture
// fields the YAML leaves out, and any the YAML sets must agree with it.
#pragma once
#include <map>
#include <string>

#include "ltrain/config/load.h"

namespace ltrain::config {

// UsageError naming the field (YAML key and config.json key) that disagrees, or what in
// config.json ltrain's models do not implement (rope scaling, biases, another activation).
void mergeHfConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set);

// Whether `path` is a directory holding config.json (a Hugging Face model directory).
bool isHfModelDir(const std::string& path);

}  // namespace ltrain::config
