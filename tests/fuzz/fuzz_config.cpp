// libFuzzer target: the config loader with overrides. The input is YAML text, then override
// strings, separated by NUL bytes. Every rejection must be a UsageError (the one-line message a
// user sees); any other exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ltrain/common/errors.h"
#include "ltrain/config/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t nul; (nul = input.find('\0', start)) != std::string::npos; start = nul + 1)
    parts.push_back(input.substr(start, nul - start));
  parts.push_back(input.substr(start));
  try {
    ltrain::config::loadConfigText(parts[0], "fuzz.yaml", {parts.begin() + 1, parts.end()});
  } catch (const ltrain::UsageError&) {
  }
  return 0;
}
