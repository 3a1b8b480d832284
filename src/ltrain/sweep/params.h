// Swept parameters and the trials they expand to. A parameter is a list of values (grid), written
// `a,b,c`, `choice(a,b,c)`, `range(start,stop[,step])` (Python's: stop excluded) or a YAML list,
// or a distribution for random search: `uniform(lo,hi)`, `loguniform(lo,hi)`, `int(lo,hi)`
// (both ends included).
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ltrain::sweep {

struct Param {
  enum class Kind { kValues, kUniform, kLogUniform, kInt };
  std::string key;
  Kind kind = Kind::kValues;
  std::vector<std::string> values;  // kValues: each a YAML value, as an override writes it
  double lo = 0, hi = 0;            // the distributions' bounds
  bool random() const { return kind != Kind::kValues; }
  std::string describe() const;  // as written back into sweep.yaml
};

// True when an override's value uses sweep syntax (a comma outside brackets, or a function).
bool isSweepValue(const std::string& value);
// UsageError naming the key and what was expected.
Param parseParam(const std::string& key, const std::string& expression);
Param paramFromYaml(const std::string& key, const YAML::Node& node);

struct Trial {
  int number = 0;                                           // 1-based
  std::vector<std::pair<std::string, std::string>> values;  // key, YAML value
  std::vector<std::string> overrides() const;               // "key=value" each
  std::string shortName() const;  // "003-lr=0.01,batch_size=64": the trial's directory name
};

// The cartesian product of the value lists; with any distribution, `samples` random draws of
// every parameter instead (lists then drawn uniformly), from `seed`.
std::vector<Trial> expandTrials(const std::vector<Param>& params, int64_t samples, uint64_t seed);

}  // namespace ltrain::sweep
