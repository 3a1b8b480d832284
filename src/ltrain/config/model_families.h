// What ltrain knows of each model.name: which data it reads and which features it takes. The
// rules (config/validate.cpp), the defaults (config/load.cpp), FLOPs, inference and start-up read
// these traits instead of comparing names. Each family's are in its spec (models/<family>/spec.cpp,
// listed in models/families.cpp); this is the view of them that config/ reads.
#pragma once
#include <string>
#include <vector>

namespace ltrain::config {

struct ModelFamily {
  std::string name;
  // Token sequences in, a score per token and vocabulary entry out (generate, export, MFU).
  bool language_model = false;
  // The user's own network: it reads whatever its layers read, and the rules about data leave it
  // alone.
  bool users_own = false;
  bool needs_images = false;        // inputs [C, H, W] only
  bool repeated_blocks = false;     // train.activation_checkpointing recomputes its blocks
  bool tensor_parallel = false;     // dist.tensor_parallel splits it
  bool layer_summary = false;       // the start of a run lists its layers as written, one a line
  bool mixture_of_experts = false;  // its feed-forward layers are routed experts (models/moe.h)
};

// Every family, in the order model.name's help lists them.
const std::vector<ModelFamily>& modelFamilies();
// The family of `name`; a family with no traits for a name not in the table (the schema's choice
// check refuses those before anything else asks).
const ModelFamily& modelFamily(const std::string& name);

}  // namespace ltrain::config
