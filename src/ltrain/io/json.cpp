#include "ltrain/io/json.h"

#include <fmt/format.h>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"

namespace ltrain::io {

Json readJsonFile(const std::string& path) {
  std::string text;
  try {
    text = readFile(path);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot read '{}': {}", path, e.what()));
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw UsageError(fmt::format("'{}' is not valid JSON (byte {})", path, e.byte));
  } catch (const Json::exception& e) {  // a number past double's range (found by fuzz_tokens)
    throw UsageError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

Json parseJsonOrDiscard(const std::string& text) {
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string dumpJsonLine(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ltrain::io
