// A trained language model outside training: `ltrain generate` and `ltrain export` load the
// config's model, its weights (a checkpoint, a model.safetensors, or model.init_from alone) and
// the tokenizer its run saved, without the training data.
#pragma once
#include <memory>
#include <string>

#include "ltrain/config/load.h"
#include "ltrain/data/codec.h"
#include "ltrain/models/generate.h"
#include "ltrain/models/hf_checkpoint.h"
#include "ltrain/models/model.h"

namespace ltrain::inference {

struct InferenceRequest {
  std::string config;  // the YAML; empty: <run>/config.yaml
  std::vector<std::string> overrides;
  std::string checkpoint;  // a .pt checkpoint or a .safetensors; empty: the run's newest
  std::string run;         // a run directory (its config and newest weights)
  std::string tokenizer;   // vocabulary.json or tokenizer.json; empty: found beside the weights
};

struct LoadedModel {
  config::LoadedConfig lc;
  models::Classifier model{nullptr};
  int64_t vocab = 0;
  std::string weights;                     // where they came from, for messages
  std::unique_ptr<data::TextCodec> codec;  // null when none was found (export needs none)
  std::string tokenizer_file;
  // Set when the model was built without parameter memory (`streamed`): reads one parameter
  // from the weights (model.safetensors or a sharded checkpoint), by ltrain's name.
  models::ParameterValues values;
};

// UsageError naming what is missing: no weights to load, a model that is no language model, no
// vocabulary size to build it with. `streamed` (export): weights in a model.safetensors or a
// sharded checkpoint are checked, not loaded, and read one tensor at a time through `values`.
LoadedModel loadTrainedModel(const InferenceRequest& req, bool need_codec, bool streamed = false);

// What `--run RUN_DIR` stands for where a command takes it (generate, export, eval, predict): its
// config.yaml unless a config is given, and its final model.safetensors, else its newest
// checkpoint, unless --checkpoint is given. UsageError naming what is missing; `weights` stays
// empty when neither --run nor --checkpoint names any.
struct RunFiles {
  std::string config, weights;
};
RunFiles resolveRun(const InferenceRequest& req);

// ltrain generate: prints the prompt and what follows it on stdout, tokens/s on stderr.
void runGenerate(const InferenceRequest& req, const std::string& prompt,
                 const models::SamplingOptions& options);
// ltrain export --hf DIR and/or --peft DIR (a LoRA run's adapters; --hf then merges them).
void runExport(const InferenceRequest& req, const std::string& hf_dir,
               const std::string& peft_dir = "");

}  // namespace ltrain::inference
