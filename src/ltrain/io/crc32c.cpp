#include "ltrain/io/crc32c.h"

#include <array>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace ltrain::io {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

// Slice-by-8: table[k][b] is the CRC of byte b followed by k zero bytes, so eight input bytes
// fold in with eight lookups and no loop-carried dependency between them.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables makeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  return t;
}

constexpr Tables kTables = makeTables();

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  auto p = static_cast<const uint8_t*>(data);
  const auto& t = kTables;
  crc = ~crc;
  while (n >= 8) {
    // Assembled byte by byte so the result does not depend on host byte order or alignment.
    const uint32_t lo =
        crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

uint32_t maskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t crc32cOfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::vector<char> piece(size_t{4} << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    crc = crc32c(piece.data(), static_cast<size_t>(in.gcount()), crc);
  }
  if (in.bad()) throw std::runtime_error("cannot read '" + path + "'");
  return crc;
}

}  // namespace ltrain::io
