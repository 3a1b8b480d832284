#include "ltrain/config/adapter_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/config/hf_config.h"
#include "ltrain/io/json.h"

namespace ltrain::config {
namespace {

// Whether a PEFT field that ltrain's LoRA does not implement is left off.
bool isOff(const io::Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty()) || (v.is_string() && v.get<std::string>() == "none");
}

}  // namespace

void mergeAdapterConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set) {
  const std::string dir = lc.cfg.finetune.adapter_from;
  if (dir.empty()) return;
  const auto file = std::filesystem::path(dir) / "adapter_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw UsageError(fmt::format(
        "{}finetune.adapter_from '{}' has no adapter_config.json: expected a PEFT adapter "
        "directory (adapter_config.json and adapter_model.safetensors, as save_pretrained "
        "writes them)",
        lc.where("finetune.adapter_from"), dir));
  io::Json j = io::readJsonFile(file.string());
  if (!j.is_object()) throw UsageError(fmt::format("'{}' is not a JSON object", file.string()));
  const std::string type = j.value("peft_type", "");
  if (type != "LORA")
    throw UsageError(fmt::format("'{}': peft_type '{}'; ltrain reads LoRA adapters (LORA)",
                                 file.string(), type));
  // (fan_in_fan_out, GPT-2's Conv1D, stores the base transposed: the adapters are the same.)
  for (const char* key :
       {"use_rslora", "rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform",
        "lora_bias", "layer_replication", "trainable_token_indices", "target_parameters"})
    if (j.contains(key) && !isOff(j[key]))
      throw UsageError(fmt::format("'{}': {} is {}, which ltrain's LoRA does not implement",
                                   file.string(), key, j[key].dump()));
  if (j.contains("bias") && j["bias"] != "none")
    throw UsageError(fmt::format("'{}': bias is {}; ltrain's LoRA trains no biases (\"none\")",
                                 file.string(), j["bias"].dump()));
  // A list of names, as ltrain's comma-separated lora.target_modules; a lone string is PEFT's
  // regular expression (or all-linear).
  if (j.contains("target_modules") && j["target_modules"].is_array()) {
    std::vector<std::string> names = j["target_modules"];
    std::sort(names.begin(), names.end());
    j["target_modules"] = fmt::format("{}", fmt::join(names, ","));
  } else if (j.contains("target_modules") && j["target_modules"] != "all-linear") {
    throw UsageError(fmt::format(
        "'{}': target_modules {} is a regular expression; ltrain reads a list of module names",
        file.string(), j["target_modules"].dump()));
  }
  if (!explicitly_set.count("finetune.method")) {
    lc.cfg.finetune.method = "lora";
    lc.sources["finetune.method"] = fmt::format("{} (peft_type)", file.string());
  }
  HfMerger m(lc, explicitly_set, file.string(), std::move(j));
  m.fields({{"lora.rank", "r"},
            {"lora.alpha", "lora_alpha"},
            {"lora.dropout", "lora_dropout"},
            {"lora.target_modules", "target_modules"},
            {"lora.use_dora", "use_dora"}});
}

}  // namespace ltrain::config
