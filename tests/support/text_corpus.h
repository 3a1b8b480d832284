// A small deterministic text for language-model tests: sentences drawn from a fixed word list, so
// that a character model has something to learn without any installed corpus.
#pragma once
#include <string>

namespace ltrain::test {

inline std::string textCorpus(int sentences) {
  static const char* words[] = {"the", "cat", "sat", "on",  "a",    "mat", "and", "dog",
                                "ran", "to",  "its", "red", "ball", "in",  "sun", "day"};
  std::string out;
  unsigned state = 12345;
  for (int s = 0; s < sentences; ++s) {
    const int n = 4 + static_cast<int>(state % 5);
    for (int w = 0; w < n; ++w) {
      state = state * 1103515245u + 12345u;
      out += words[(state >> 16) % 16];
      out += w + 1 < n ? " " : ".\n";
    }
  }
  return out;
}

}  // namespace ltrain::test
