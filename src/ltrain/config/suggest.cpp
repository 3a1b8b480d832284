// "did you mean ...?" for unknown keys.
#include <algorithm>
#include <string>
#include <vector>

#include "ltrain/common/edit_distance.h"
#include "ltrain/config/load.h"
#include "ltrain/config/schema.h"

namespace ltrain::config {
namespace {

std::string leaf(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::string closestKey(const std::string& key) {
  std::string best;
  size_t best_score = std::string::npos;
  for (const auto& o : schema()) {
    // A misspelt full path, or the right leaf under the wrong (or no) section.
    size_t full = editDistance(key, o.path);
    size_t by_leaf = editDistance(leaf(key), leaf(o.path)) + 1;
    size_t score = std::min(full, by_leaf);
    if (score < best_score) best_score = score, best = o.path;
    // A misspelt section name ("modle:").
    for (size_t dot = o.path.find('.'); dot != std::string::npos; dot = o.path.find('.', dot + 1)) {
      const std::string section = o.path.substr(0, dot);
      size_t d = editDistance(key, section);
      if (d < best_score) best_score = d, best = section;
    }
  }
  size_t limit = std::max<size_t>(2, leaf(key).size() / 3 + 1);
  return best_score <= limit ? best : "";
}

}  // namespace ltrain::config
