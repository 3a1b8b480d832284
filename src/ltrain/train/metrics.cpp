#include "ltrain/train/metrics.h"

#include <fmt/format.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "ltrain/io/files.h"

namespace ltrain::train {

void MetricsLog::open(const std::string& path, int64_t resume_step) {
  std::error_code ec;
  if (resume_step >= 0 && std::filesystem::exists(path, ec)) {
    static const std::regex step(R"re("step":\s*(\d+))re");
    std::istringstream in(io::readFile(path));
    std::string line, kept;
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_search(line, m, step) && std::stoll(m[1]) > resume_step) continue;
      kept += line + "\n";
    }
    io::writeFileAtomic(path, kept);
  }
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error(fmt::format("cannot open '{}' for writing", path));
}

void MetricsLog::write(const io::JsonObject& record) {
  if (!out_.is_open()) return;
  out_ << record.str() << '\n';
  out_.flush();
}

}  // namespace ltrain::train
