// A model family's spec, torchtitan's TrainSpec in C++: what ltrain knows of one model.name apart
// from its modules. Each family is one folder, models/<family>/: spec.cpp (this, without torch:
// the config code and its fuzz target read it) and the builder (models/builder.h). The one list
// of families is models/families.def; config/ (options, rules, config.json), train/ (FLOPs) and
// inference/ (export) ask the spec instead of comparing names.
#pragma once
#include <string>
#include <vector>

#include "ltrain/config/load.h"
#include "ltrain/config/model_families.h"
#include "ltrain/config/schema.h"
#include "ltrain/io/json.h"

namespace ltrain::config {
class HfMerger;
}

namespace ltrain::models {

// One of ltrain's parameter names as transformers names it.
struct HfName {
  std::string name;
  bool transposed = false;  // GPT-2's Conv1D: stored [in, out]
  // The model keeps the first rows of the stored tensor, which may have more (GPT-2's position
  // table at a shorter model.block_size than n_positions).
  bool leading_rows = false;
};

// The family's Hugging Face adapter: config.json in and out, parameter names.
struct HfAdapter {
  std::vector<std::string> model_types;  // config.json's model_type values it imports
  void (*import_config)(config::HfMerger&) = nullptr;
  // config.json for export --hf; `max_positions` 0: model.block_size.
  io::Json (*export_config)(const config::ModelConfig&, int64_t vocab,
                            int64_t max_positions) = nullptr;
  // ltrain's parameter name as transformers' (null: the same name).
  HfName (*name)(const std::string& ltrain_name, const config::ModelConfig&) = nullptr;
  // A prefix transformers' base model drops when saved alone (GPT2Model: "transformer.").
  std::string base_prefix;
};

// How dist.tensor_parallel takes over one module (PyTorch's ParallelStyle): the model is built
// plain and parallelize() (models/parallelize.h) gives each module of the plan its style.
enum class TpStyle {
  kColwise,         // a Linear split along its output (with its bias): the input enters the group
  kRowwise,         // a Linear split along its input; its outputs summed over the group, then bias
  kVocabEmbedding,  // an Embedding split by rows of the vocabulary
  kVocabHead,       // the head's matrix (its own, or the tied embedding's) split by the vocabulary
  kSequenceSlice,   // a replicated Embedding whose lookup keeps this rank's part of the sequence
                    // under dist.sequence_parallel (GPT-2's positions)
  kPartialGradient  // replicated parameters each rank's heads alone contribute to: the gradient is
                    // summed over the group (qwen3's per-head norms)
};
struct TpRule {
  // A module path, as the model names its parameters less the final ".<parameter>"; "*" stands
  // for one element of it ("model.layers.*.mlp.up_proj").
  std::string path;
  TpStyle style;
  int64_t parts = 1;  // kColwise: equal runs split each on its own (GPT-2's fused q, k, v: 3)
};

struct ModelSpec {
  config::ModelFamily traits;  // its name and what it reads and takes
  std::string help;            // its entry in model.name's help
  // Its own config keys (the schema marks them "model <name> only"), and the keys declared by
  // another family or by the transformer group (models/transformer.h) that it takes too.
  std::vector<config::Option> (*options)() = nullptr;
  std::vector<std::string> takes;
  // Its rules on its own keys (UsageError naming the key), and under dist.tensor_parallel N.
  void (*validate)(const config::LoadedConfig&) = nullptr;
  void (*validate_tensor_parallel)(const config::LoadedConfig&, int64_t n) = nullptr;
  HfAdapter hf;
  // dist.tensor_parallel: which module is column-, row- or vocabulary-parallel (null: none).
  std::vector<TpRule> (*tensor_parallel_plan)(const config::ModelConfig&) = nullptr;
  // Training FLOPs per token (forward and backward) of a model of `params` parameters; null: none.
  double (*flops_per_token)(const config::ModelConfig&, int64_t params, int64_t vocab) = nullptr;
};

// Every family, in the order model.name's help lists them (models/families.def).
const std::vector<ModelSpec>& modelSpecs();
const ModelSpec* findModelSpec(const std::string& name);
// The names of the families for which `has` holds, as a reader lists them: "gpt, llama or qwen3".
std::vector<std::string> familiesWhere(bool (*has)(const ModelSpec&));
std::string listed(const std::vector<std::string>& names, const std::string& last_word = "or");

}  // namespace ltrain::models
