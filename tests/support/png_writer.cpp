#include "support/png_writer.h"

#include <zlib.h>

#include <fstream>
#include <stdexcept>

namespace ltrain::test {
namespace {

void put32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}

// A chunk: length, type, data, and the CRC-32 of type and data.
void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                         static_cast<uInt>(body.size()))));
}

}  // namespace

void writePng(const std::string& path, int64_t height, int64_t width, int channels,
              const std::vector<uint8_t>& pixels) {
  const int colour = channels == 1 ? 0 : channels == 3 ? 2 : channels == 4 ? 6 : -1;
  if (colour < 0 || static_cast<int64_t>(pixels.size()) != height * width * channels)
    throw std::invalid_argument("writePng: channels 1, 3 or 4 and height x width x channels bytes");
  std::string ihdr;
  put32(ihdr, static_cast<uint32_t>(width));
  put32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string{8, static_cast<char>(colour), 0, 0, 0};  // depth 8, deflate, no interlace
  std::string raw;  // each row behind filter type 0 (none)
  for (int64_t y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(pixels.data()) + y * width * channels,
               static_cast<size_t>(width * channels));
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(size, '\0');
  if (compress(reinterpret_cast<Bytef*>(packed.data()), &size,
               reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size())) != Z_OK)
    throw std::runtime_error("writePng: zlib failed");
  packed.resize(size);
  std::string out = "\x89PNG\r\n\x1a\n";
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", packed);
  chunk(out, "IEND", "");
  std::ofstream f(path, std::ios::binary);
  f << out;
  if (!f) throw std::runtime_error("writePng: cannot write " + path);
}

}  // namespace ltrain::test
