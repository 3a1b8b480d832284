#include "ltrain/io/checksummed_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ltrain/io/files.h"

namespace ltrain::io {
namespace {

void putLe(char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t getLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}

// zlib's crc32 takes uInt lengths; feed large buffers in pieces.
uint32_t crcUpdate(uint32_t crc, const void* data, size_t size) {
  auto p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    size -= n;
  }
  return crc;
}

class FdWriter {
 public:
  explicit FdWriter(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~FdWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t size) {
    auto p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      p += n;
      size -= static_cast<size_t>(n);
    }
  }
  void pwriteAll(const char* data, size_t size, off_t at) {
    if (::pwrite(fd_, data, size, at) != static_cast<ssize_t>(size)) fail("cannot write");
  }
  void close() {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("cannot write");
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(fmt::format("{} '{}': {}", what, path_, std::strerror(errno)));
  }
  std::string path_;
  int fd_ = -1;
};

}  // namespace

void writeChecksummed(const std::string& path, std::string_view magic,
                      const std::function<void(const ByteSink&)>& produce) {
  replaceAtomic(path, [&](const std::string& tmp) {
    FdWriter out(tmp);
    char header[kChecksumHeaderBytes] = {};
    std::memcpy(header, magic.data(), 8);
    out.write(header, sizeof header);
    uint64_t length = 0;
    uint32_t crc = static_cast<uint32_t>(::crc32(0, nullptr, 0));
    produce([&](const void* data, size_t size) {
      out.write(data, size);
      crc = crcUpdate(crc, data, size);
      length += size;
    });
    putLe(header + 8, length, 8);
    putLe(header + 16, crc, 4);
    out.pwriteAll(header, sizeof header, 0);
    out.close();
  });
}

std::string_view verifyChecksummed(std::string_view bytes, std::string_view magic,
                                   std::string_view what) {
  if (bytes.size() < kChecksumHeaderBytes)
    throw std::runtime_error(fmt::format("truncated: {} bytes, shorter than the {}-byte header",
                                         bytes.size(), kChecksumHeaderBytes));
  if (bytes.substr(0, 8) != magic)
    throw std::runtime_error(fmt::format("not {} (its first bytes are not the '{}' marker)", what,
                                         magic.substr(0, magic.find('\n'))));
  const uint64_t length = getLe(bytes.data() + 8, 8);
  const uint32_t stored = static_cast<uint32_t>(getLe(bytes.data() + 16, 4));
  const uint64_t have = bytes.size() - kChecksumHeaderBytes;
  if (have != length)
    throw std::runtime_error(fmt::format("{}: the header says {} bytes of data, the file holds {}",
                                         have < length ? "truncated" : "trailing bytes", length,
                                         have));
  auto payload = bytes.substr(kChecksumHeaderBytes);
  const uint32_t computed =
      crcUpdate(static_cast<uint32_t>(::crc32(0, nullptr, 0)), payload.data(), payload.size());
  if (computed != stored)
    throw std::runtime_error(
        fmt::format("checksum mismatch (stored {:08x}, computed {:08x}): the file is corrupt",
                    stored, computed));
  return payload;
}

}  // namespace ltrain::io
