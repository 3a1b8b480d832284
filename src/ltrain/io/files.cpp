#include "ltrain/io/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ltrain::io {
namespace {

void fsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && !directory)
    throw std::runtime_error(
        fmt::format("cannot flush '{}' to disk: {}", path, std::strerror(err)));
}

}  // namespace

void replaceAtomic(const std::string& path, const std::function<void(const std::string&)>& write) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    write(tmp);
    fsyncPath(tmp, false);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
      throw std::runtime_error(
          fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
    auto dir = std::filesystem::path(path).parent_path();
    fsyncPath(dir.empty() ? "." : dir.string(), true);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

void writeFileAtomic(const std::string& path, const std::string& contents) {
  replaceAtomic(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
    out << contents;
    out.flush();
    if (!out)
      throw std::runtime_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  });
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ltrain::io
