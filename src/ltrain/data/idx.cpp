#include "ltrain/data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "ltrain/common/errors.h"

namespace ltrain::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// gzread reads compressed and plain files alike. A short count means the file ended; damaged
// compressed data is an error of its own.
size_t readFully(gzFile f, uint8_t* dst, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    int got = gzread(f, dst + done, chunk);
    if (got < 0 || (got == 0 && done < n)) {
      int errnum = Z_OK;
      const char* msg = gzerror(f, &errnum);
      if (errnum == Z_DATA_ERROR || errnum == Z_STREAM_ERROR || errnum == Z_MEM_ERROR ||
          errnum == Z_ERRNO)
        throw UsageError(fmt::format("data file '{}' is corrupt: {}", path,
                                     errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

IdxArray readIdx(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(fmt::format("data file '{}' not found", path));
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw UsageError(fmt::format("data file '{}' cannot be opened", path));

  uint8_t magic[4];
  if (readFully(f.get(), magic, 4, path) != 4)
    throw UsageError(
        fmt::format("data file '{}' is truncated: expected a 4-byte IDX header", path));
  const int ndim = magic[3];
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || ndim < 1 || ndim > 4)
    throw UsageError(fmt::format(
        "data file '{}' is not an unsigned-byte IDX file: magic 0x{:02x}{:02x}{:02x}{:02x}, "
        "expected 0x000008NN with 1..4 dimensions",
        path, magic[0], magic[1], magic[2], magic[3]));

  IdxArray out;
  size_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    uint8_t b[4];
    if (readFully(f.get(), b, 4, path) != 4)
      throw UsageError(fmt::format("data file '{}' is truncated inside its header", path));
    const uint32_t size =
        (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    if (size == 0 || size > (1u << 28))
      throw UsageError(
          fmt::format("data file '{}': dimension {} has size {}, expected 1..2^28", path, d, size));
    out.dims.push_back(size);
    total *= size;  // at most 2^34 * 2^28 here: no overflow before the check
    if (total > (size_t(1) << 34))
      throw UsageError(fmt::format("data file '{}' declares more than 2^34 bytes of data", path));
  }
  // Grown as the data arrives: a corrupt header may declare gigabytes that the file does not hold.
  size_t got = 0;
  while (got < total) {
    const size_t want = std::min(total - got, size_t(64) << 20);
    out.bytes.resize(got + want);
    const size_t n = readFully(f.get(), out.bytes.data() + got, want, path);
    got += n;
    if (n < want) break;
  }
  if (got != total)
    throw UsageError(fmt::format("data file '{}' is truncated: expected {} bytes of data, found {}",
                                 path, total, got));
  uint8_t extra;
  if (readFully(f.get(), &extra, 1, path) != 0)
    throw UsageError(
        fmt::format("data file '{}' has bytes after the {} its header declares", path, total));
  int errnum = 0;
  gzerror(f.get(), &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END)
    throw UsageError(fmt::format("data file '{}' is corrupt (gzip stream error)", path));
  return out;
}

}  // namespace ltrain::data
