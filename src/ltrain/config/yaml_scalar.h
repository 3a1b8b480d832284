// One reading of YAML scalars for everything ltrain takes from YAML: the config's values
// (option_builder.h), the layer arguments of model.layers (kept as written, read by type as they
// are used) and sweep files. yaml-cpp's rules throughout: true/false, yes/no, on/off; decimal, 0x
// hexadecimal and 0-prefixed octal integers, out-of-range ones refused; and only finite numbers.
// Each caller words its own error around a nullopt.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace ltrain::config {

inline std::optional<bool> yamlBool(const YAML::Node& n) {
  bool v;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return std::nullopt;
  return v;
}

inline std::optional<int64_t> yamlInt(const YAML::Node& n) {
  int64_t v;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) return std::nullopt;
  return v;
}

inline std::optional<double> yamlNumber(const YAML::Node& n) {
  double v;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v))
    return std::nullopt;
  return v;
}

// `text` as the YAML document it is (a layer argument as written); a null node for text that is
// no YAML, which every reader above refuses.
inline YAML::Node yamlOf(const std::string& text) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception&) {
    return YAML::Node();
  }
}

}  // namespace ltrain::config
