#include "ltrain/train/metrics.h"

#include <fmt/format.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "ltrain/io/files.h"

namespace ltrain::train {

void MetricsLog::open(const std::string& path, int64_t resume_step) {
  std::error_code ec;
  if (resume_step >= 0 && std::filesystem::exists(path, ec)) {
    std::istringstream in(io::readFile(path));
    std::string line, kept;
    while (std::getline(in, line)) {
      // A line cut by a kill (not JSON) goes too: the record is written again.
      const io::Json j = io::parseJsonOrDiscard(line);
      if (j.is_discarded() || !j.is_object()) continue;
      const auto step = j.find("step");
      if (step != j.end() && step->is_number_integer() && step->get<int64_t>() > resume_step)
        continue;
      kept += line + "\n";
    }
    io::writeFileAtomic(path, kept);
  }
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error(fmt::format("cannot open '{}' for writing", path));
}

void MetricsLog::write(const io::Json& record) {
  if (!out_.is_open()) return;
  out_ << io::dumpJsonLine(record) << '\n';
  out_.flush();
}

}  // namespace ltrain::train
