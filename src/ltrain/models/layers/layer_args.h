// What each layer kind of model.layers (layer_graph.h) is built from: its arguments, read by type
// as they are used (Args), and the shape of the input it is given (LayerInput).
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/modules/container/any.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ltrain/common/edit_distance.h"
#include "ltrain/config/experiment_config.h"
#include "ltrain/config/yaml_scalar.h"
#include "ltrain/models/layers/layer_graph.h"

namespace ltrain::models::layer_graph {

using Shape = std::vector<int64_t>;

inline std::string shapeText(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// The arguments of one layer, read by type as they are used; leftovers are errors.
class Args {
 public:
  Args(const config::LayerSpec& spec, std::string path) : spec_(spec), path_(std::move(path)) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw LayerError(fmt::format("{} ({}): {}", path_, spec_.type, why), spec_.line);
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt,
                  int64_t min = 0) {
    const auto* v = take(key);
    if (!v) {
      if (!fallback) fail(fmt::format("needs {}: an integer{}", key, misspelt(key)));
      return *fallback;
    }
    const auto x = config::yamlInt(config::yamlOf(*v));
    if (!x) fail(fmt::format("{}: expected an integer, got '{}'", key, *v));
    if (*x < min) fail(fmt::format("{}: must be >= {}, got {}", key, min, *x));
    return *x;
  }
  double number(const std::string& key, double fallback, double lo, double hi) {
    const auto* v = take(key);
    if (!v) return fallback;
    const auto x = config::yamlNumber(config::yamlOf(*v));
    if (!x || *x < lo || *x > hi)
      fail(fmt::format("{}: expected a number in [{}, {}], got '{}'", key, lo, hi, *v));
    return *x;
  }
  bool flag(const std::string& key, bool fallback) {
    const auto* v = take(key);
    if (!v) return fallback;
    const auto x = config::yamlBool(config::yamlOf(*v));
    if (!x) fail(fmt::format("{}: expected true or false, got '{}'", key, *v));
    return *x;
  }
  std::string text(const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& choices) {
    const auto* v = take(key);
    if (!v) return fallback;
    if (std::find(choices.begin(), choices.end(), *v) == choices.end())
      fail(fmt::format("{}: expected one of {}, got '{}'", key, fmt::join(choices, "|"), *v));
    return *v;
  }
  // An integer or a list of `n` integers (kernel: 3, or kernel: [3, 5]).
  std::vector<int64_t> sizes(const std::string& key, size_t n, std::optional<int64_t> fallback,
                             int64_t min = 1) {
    const auto* v = find(key);
    if (const auto list = v ? config::yamlOf(*v) : YAML::Node(); list.IsSequence()) {
      used_.insert(key);
      std::vector<int64_t> out;
      for (const auto& e : list) {
        const auto x = config::yamlInt(e);
        if (!x || *x < min) fail(fmt::format("{}: expected integers >= {}, got {}", key, min, *v));
        out.push_back(*x);
      }
      if (out.size() != n) fail(fmt::format("{}: expected {} values, got {}", key, n, *v));
      return out;
    }
    return std::vector<int64_t>(n, integer(key, fallback, min));
  }
  // " ('kernal' is no argument of conv2d: kernel?)" when an argument given is close to `key`.
  std::string misspelt(const std::string& key) const {
    for (const auto& [k, v] : spec_.args) {
      if (k.empty() || k == key) continue;
      if (editDistance(k, key) <= 2)
        return fmt::format(" ('{}' is no argument of {}: did you mean {}?)", k, spec_.type, key);
    }
    return "";
  }
  // A lone value (dropout: 0.25) stands for the layer's first argument.
  void lone(const std::string& key) {
    for (auto& [k, v] : args_())
      if (k.empty()) renamed_[key] = v;
  }
  // Unknown arguments, with the closest known one.
  void finish(const std::vector<std::string>& known) const {
    for (const auto& [k, v] : spec_.args) {
      const std::string key = k.empty() ? "" : k;
      if (key.empty() && !renamed_.empty()) continue;
      if (used_.count(key)) continue;
      if (key.empty())
        fail(known.empty() || known.front() == "layers"
                 ? fmt::format("'{}' is not its argument: write its layers as a list", v)
                 : fmt::format("a lone value ('{}') needs a name here: write {{{}: ...}}", v,
                               known.front()));
      fail(fmt::format("unknown argument '{}'{}", key,
                       known.empty() ? std::string(" (it takes none)")
                                     : fmt::format("; it takes {}", fmt::join(known, ", "))));
    }
  }

 private:
  const std::vector<std::pair<std::string, std::string>>& args_() const { return spec_.args; }
  const std::string* find(const std::string& key) const {
    auto r = renamed_.find(key);
    if (r != renamed_.end()) return &r->second;
    for (const auto& [k, v] : spec_.args)
      if (k == key) return &v;
    return nullptr;
  }
  const std::string* take(const std::string& key) {
    const auto* v = find(key);
    if (v) used_.insert(key);
    return v;
  }
  const config::LayerSpec& spec_;
  std::string path_;
  std::map<std::string, std::string> renamed_;
  std::set<std::string> used_;
};

// A layer as built: its module and its output's shape per example.
struct Built {
  torch::nn::AnyModule module;
  Shape out;
};

// What one layer kind's builder sees: its arguments' spec, where it is, and the input it is given.
struct LayerInput {
  const config::LayerSpec& spec;
  const Shape& in;
  std::string path;
  bool last;        // the network's last layer
  int64_t classes;  // the data's classes (a language model's vocabulary); < 1: not known yet
  bool tokens;      // the inputs are token ids
  void need(const Args& a, size_t dims, const char* what) const {
    if (in.size() != dims)
      a.fail(fmt::format("expects {} per example, but its input is {}", what, shapeText(in)));
  }
  // An `in`-like argument the user may give: it must be what the input has.
  void checkIn(Args& a, const std::string& key, int64_t inferred, const char* what) const {
    if (a.has(key)) {
      const int64_t given = a.integer(key, std::nullopt, 1);
      if (given != inferred)
        a.fail(fmt::format("input has {} {} per example, but {}: {} was given", inferred, what, key,
                           given));
    }
  }
  // The class count, or `placeholder` where it is not known yet (`ltrain config` on text, whose
  // vocabulary only the file says).
  int64_t classesOr(int64_t placeholder) const { return classes > 0 ? classes : placeholder; }
};

}  // namespace ltrain::models::layer_graph
