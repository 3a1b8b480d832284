// finetune.method lora: PEFT's LoRA applied to a built model from outside, by the walk tensor
// parallelism's pass takes (models/module_paths.h). Each models::Linear that lora.target_modules
// names gets adapters (LinearImpl::addLora), and every other parameter is frozen: it gets no
// gradient, so DDP reduces only the adapters and the optimizer keeps state for them alone.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/model.h"

namespace ltrain::models {

struct LoraSummary {
  std::vector<std::string> names;    // the adapted modules' names, sorted ("q_proj", "v_proj")
  int64_t modules = 0;               // how many linears got adapters
  int64_t trainable = 0, total = 0;  // parameters
};

// UsageError when an entry of lora.target_modules names no linear of the model (naming those it
// has). The adapters' A are drawn from torch's generator.
LoraSummary applyLora(Classifier& model, const config::LoraConfig& cfg);

// finetune.method lora on a model whose base is in place: applyLora, then, when `starting` (no
// run's weights to read, which hold the adapters), finetune.adapter_from's adapter. The trainer,
// eval and generate call it; nullopt for full fine-tuning.
std::optional<LoraSummary> applyFinetuning(Classifier& model, const config::ExperimentConfig& cfg,
                                           bool starting);

// Whether the model carries adapters (applyLora ran).
bool hasLora(const Classifier& model);

// finetune.adapter_from: adapter_model.safetensors's tensors into the adapters, by PEFT's names
// (base_model.model.<transformers' module>.lora_A.weight). UsageError naming the file and the
// tensor that is missing, extra or of another shape (an adapter made for another base).
void loadAdapter(Classifier& model, const config::ModelConfig& m, const std::string& dir);

// ltrain export --peft DIR: adapter_config.json and adapter_model.safetensors as PEFT's
// save_pretrained writes them, which peft.PeftModel.from_pretrained loads onto transformers' base
// (model.init_from). UsageError when the model has no adapters or `dir` holds files ltrain did
// not write.
void exportPeft(const Classifier& model, const config::ExperimentConfig& cfg,
                const std::string& dir);

// Each adapter merged into its linear's weight (weight + alpha / rank * B A) and removed, and a
// base held in bf16 back in fp32: the plain model the tuning made, for export --hf.
void mergeLora(Classifier& model);

}  // namespace ltrain::models
