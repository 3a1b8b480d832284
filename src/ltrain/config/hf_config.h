// model.init_from naming a Hugging Face model directory: its config.json fills the architecture
// fields the YAML leaves out, and any the YAML sets must agree with it.
#pragma once
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "ltrain/config/load.h"
#include "ltrain/io/json.h"

namespace ltrain::config {

// A config.json being merged into the config: each family's spec (models/<family>/spec.cpp) says
// which of its fields fill which keys, and what in it ltrain does not implement.
class HfMerger {
 public:
  struct Field {
    const char* path;    // ltrain's key
    const char* hf_key;  // config.json's
  };
  HfMerger(LoadedConfig& lc, std::map<std::string, bool>& set, std::string file, io::Json j)
      : lc_(lc), set_(set), file_(std::move(file)), j_(std::move(j)) {}

  // Takes `value` (config.json's `hf_key`) into `path`, or checks it against the YAML's.
  void take(const std::string& path, const std::string& hf_key, const YAML::Node& value);
  // take() for each field config.json has (not null).
  void fields(const std::vector<Field>& list);
  [[noreturn]] void unsupported(const std::string& what) const;
  // Whether the YAML (or an earlier field) set `path`.
  bool given(const std::string& path) const { return set_.count(path) > 0; }
  const io::Json& json() const { return j_; }
  LoadedConfig& lc() { return lc_; }
  const std::string& file() const { return file_; }

 private:
  LoadedConfig& lc_;
  std::map<std::string, bool>& set_;
  std::string file_;
  io::Json j_;
};

// The value a config.json field gives, as YAML for the option's parser; null when absent.
YAML::Node hfValue(const io::Json& v);

// UsageError naming the field (YAML key and config.json key) that disagrees, or what in
// config.json ltrain's models do not implement (rope scaling, biases, another activation).
void mergeHfConfig(LoadedConfig& lc, std::map<std::string, bool>& explicitly_set);

// Whether `path` is a directory holding config.json (a Hugging Face model directory).
bool isHfModelDir(const std::string& path);

}  // namespace ltrain::config
