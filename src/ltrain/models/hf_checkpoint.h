// Hugging Face checkpoints in and out: model.safetensors (or shards listed in
// model.safetensors.index.json) under transformers' names. llama's parameters carry those names
// already; gpt's map onto GPT2LMHeadModel's (transformer.h.0.attn.c_attn.weight, ...), whose
// Conv1D matrices are stored transposed ([in, out]).
#pragma once
#include <functional>
#include <string>

#include "ltrain/config/experiment_config.h"
#include "ltrain/models/model.h"
#include "ltrain/models/spec.h"

namespace ltrain::models {

// ltrain's parameter `name` as transformers names it.
HfName hfName(const config::ModelConfig& cfg, const std::string& name);

// model.init_from: a Hugging Face directory, or a .safetensors file of the model's own names.
// UsageError naming the file and the first tensor that is missing, extra or of another shape.
void loadInitialWeights(Classifier& model, const config::ModelConfig& cfg);

// Writes `dir` as transformers' from_pretrained reads it: config.json, generation_config.json and
// model.safetensors (float32). `max_positions`: the config's max_position_embeddings for llama (0:
// model.block_size). UsageError when the directory holds files ltrain did not write.
// The tensors are written one at a time (io::SafetensorsStream): `values`, where given, reads
// parameter `name` (ltrain's name) from wherever it is stored, so that a model built without
// parameter memory (models::build(.., deferred)) is exported with one tensor in memory at a time.
using ParameterValues = std::function<torch::Tensor(const std::string& name)>;
void exportHf(const Classifier& model, const config::ModelConfig& cfg, int64_t vocab,
              const std::string& dir, int64_t max_positions = 0,
              const ParameterValues& values = nullptr);

}  // namespace ltrain::models
