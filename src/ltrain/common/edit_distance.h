// "Did you mean ...?" for misspelt names (config keys, layer types and arguments). Levenshtein's
// distance is written here: none of the project's libraries offers one, and it is ten lines.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace ltrain {

inline size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The entry of `known` nearest to `word`, if it is at most `limit` edits away; else "".
inline std::string closestOf(const std::string& word, const std::vector<std::string>& known,
                             size_t limit) {
  std::string best;
  size_t score = limit + 1;
  for (const auto& k : known)
    if (const size_t d = editDistance(word, k); d < score) score = d, best = k;
  return best;
}

}  // namespace ltrain
