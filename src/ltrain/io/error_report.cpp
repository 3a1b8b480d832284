#include "ltrain/io/error_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "ltrain/io/files.h"
#include "ltrain/io/json.h"

namespace ltrain {

namespace {
// One line of printable text: messages may quote bytes of a binary file or a multi-line library
// error, and a terminal or a log parser must get the one line promised.
std::string printable(const std::string& s) {
  std::string out = s.substr(0, s.find('\n'));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  while (!out.empty() && (out.back() == ' ' || out.back() == ':')) out.pop_back();
  return out;
}
}  // namespace

namespace {
std::string& errorLog() {
  static std::string path;
  return path;
}
}  // namespace

void setErrorLog(const std::string& path) {
  errorLog() = path;
}

void reportError(const std::string& raw) {
  const std::string message = printable(raw);
  fmt::print(stderr, "ltrain: error: {}\n", message);
  std::fflush(stderr);
  if (!errorLog().empty())
    if (std::FILE* f = std::fopen(errorLog().c_str(), "a")) {
      fmt::print(f, "ltrain: error: {}\n", message);
      std::fclose(f);
    }
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE")) {
    try {
      // torchrun's error-file layout: {"message": {"message": ..., "extraInfo": {...}}}.
      const io::Json j = {{"message",
                           {{"message", message},
                            {"extraInfo", {{"timestamp", std::to_string(std::time(nullptr))}}}}}};
      io::writeFileAtomic(path, io::dumpJsonLine(j) + "\n");
    } catch (const std::exception&) {
      // The message is on stderr already; the error file is a courtesy.
    }
  }
}

}  // namespace ltrain
