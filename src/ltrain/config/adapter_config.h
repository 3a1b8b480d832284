// finetune.adapter_from naming a PEFT adapter directory: its adapter_config.json fills the lora
// keys the YAML leaves out (r, lora_alpha, lora_dropout, target_modules), and any the YAML sets
// must agree with it, as model.init_from's config.json fills the model's.
#pragma once
#include <map>
#include <string>

#include "ltrain/config/load.h"

namespace ltrain::config {

// UsageError naming the directory or field: no adapter_config.json, another PEFT method than
// LoRA, what ltrain's LoRA does not implement (DoRA, rsLoRA, per-module ranks, biases,
// modules_to_save, a target_modules regular expression), or a key that disagrees with the YAML.
void mergeAdapterConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set);

}  // namespace ltrain::config
