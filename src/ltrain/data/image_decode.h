// JPEG and PNG files to 8-bit pixels, as Pillow's Image.open(path).convert(mode) gives them:
// libjpeg-turbo (TurboJPEG, the accurate integer IDCT, as Pillow's default) and libpng. Gray,
// gray + alpha, RGB, RGBA and palette images come out with the requested channel count: alpha
// and palette transparency dropped (Pillow's convert("RGB") drops them too), gray replicated, RGB
// to gray by ITU-R 601-2 luma (Pillow's "L"); 16-bit colour keeps its high byte, 16-bit gray is
// clamped to 255 (Pillow's convert of its "I;16" mode).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ltrain::data {

struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
  // The stored size: larger than height x width when a JPEG was decoded DCT-scaled.
  int64_t full_height = 0, full_width = 0;
};

// The smallest scale the decoder may go down to, given the stored height and width: a JPEG is
// then decoded at the smallest of libjpeg's DCT reductions (1/8, 1/4, 1/2) that is at least this
// (an IDCT of fewer coefficients: less work than decoding in full and resizing). Empty or >= 1:
// full size, Pillow's pixels.
using MinScale = std::function<double(int64_t height, int64_t width)>;

// `channels`: 1 or 3. `bytes` are the file's contents, `path` only names it in errors:
// UsageError "image '<path>' ..." for a file that is neither JPEG nor PNG, or is truncated or
// corrupt, or uses what ltrain does not decode (CMYK JPEG).
Image decodeImage(const uint8_t* bytes, size_t size, int channels, const std::string& path,
                  const MinScale& min_scale = {});
// Reads the file first (UsageError naming it when it cannot be read).
Image decodeImageFile(const std::string& path, int channels, const MinScale& min_scale = {});

}  // namespace ltrain::data
