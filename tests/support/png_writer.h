// Test support: writes 8-bit PNG files (gray, RGB or RGBA) with zlib alone, for tests that run
// where Python's Pillow may be missing (the GPU machine's bare python3). Pillow-written files are
// what the decoder tests compare with; this only makes inputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ltrain::test {

// `pixels`: height x width x channels bytes, row by row; channels 1, 3 or 4.
void writePng(const std::string& path, int64_t height, int64_t width, int channels,
              const std::vector<uint8_t>& pixels);

}  // namespace ltrain::test
