// What ltrain knows of each model.name, in one table: which data it reads and which features it
// takes. The rules (config/validate.cpp), the defaults (config/load.cpp), FLOPs, inference and
// start-up read these traits instead of comparing names; a new family is one row here and its
// builder in models/registry.cpp.
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
  bool needs_images = false;     // inputs [C, H, W] only
  bool repeated_blocks = false;  // train.activation_checkpointing recomputes its blocks
};

// Every family, in the order model.name's help lists them.
const std::vector<ModelFamily>& modelFamilies();
// The family of `name`; a family with no traits for a name not in the table (the schema's choice
// check refuses those before anything else asks).
const ModelFamily& modelFamily(const std::string& name);

}  // namespace ltrain::config
