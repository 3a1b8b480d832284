// The config schema: every option's dotted path, type, default, help and constraints, declared
// once. Loading, overrides, `ltrain config`, `--help` and docs/config.md are all driven from this
// table.
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ltrain/config/experiment_config.h"

namespace ltrain::config {

struct Option {
  std::string path;       // dotted, e.g. "optimizer.lr"
  std::string type_name;  // as shown to users: "float", "int", "bool", "string", "list of int", ...
  std::string help;
  std::vector<std::string> choices;  // non-empty: the value must be one of these
  std::optional<double> min, max;    // numeric bounds (each element for lists)
  bool min_exclusive = false;
  std::string model;  // non-empty: a field of these models only ("gpt" or "gpt|llama")
  // Parses `node` into the config; throws UsageError whose text starts with what was expected.
  std::function<void(ExperimentConfig&, const YAML::Node&)> assign;
  std::function<YAML::Node(const ExperimentConfig&)> read;
  std::function<void(ExperimentConfig&)> set_default;

  // Builder helpers used by the table.
  Option& oneOf(std::vector<std::string> c) {
    choices = std::move(c);
    return *this;
  }
  Option& positive() {
    min = 0;
    min_exclusive = true;
    return *this;
  }
  Option& atLeast(double v) {
    min = v;
    min_exclusive = false;
    return *this;
  }
  Option& atMost(double v) {
    max = v;
    return *this;
  }
  Option& forModel(std::string m) {
    model = std::move(m);
    return *this;
  }
  // Whether model.name `name` has this field.
  bool appliesTo(const std::string& name) const {
    return model.empty() || ("|" + model + "|").find("|" + name + "|") != std::string::npos;
  }
};

const std::vector<Option>& schema();
const Option* findOption(const std::string& path);
bool isSection(const std::string& path);  // "data", "model", ... (prefix of some option)
ExperimentConfig defaults();

// Bounds and choices of one option against the value now in `cfg`; throws UsageError.
void checkConstraints(const Option& opt, const ExperimentConfig& cfg);

}  // namespace ltrain::config
