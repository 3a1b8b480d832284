#include "ltrain/common/error_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace ltrain {

void reportError(const std::string& message) {
  fmt::print(stderr, "ltrain: error: {}\n", message);
  std::fflush(stderr);
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE")) {
    try {
      io::writeFileAtomic(
          path,
          fmt::format(
              "{{\"message\": {{\"message\": {}, \"extraInfo\": {{\"timestamp\": \"{}\"}}}}}}\n",
              io::JsonObject::quote(message), std::time(nullptr)));
    } catch (const std::exception&) {
      // The message is on stderr already; the error file is a courtesy.
    }
  }
}

}  // namespace ltrain
