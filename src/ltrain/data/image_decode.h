// JPEG and PNG files to 8-bit pixels, as Pillow's Image.open(path).convert(mode) gives them:
// libjpeg-turbo (TurboJPEG, the accurate integer IDCT, as Pillow's default) and libpng. Gray,
// gray + alpha, RGB, RGBA and palette images come out with the requested channel count: alpha
// and palette transparency dropped (Pillow's convert("RGB") drops them too), gray replicated, RGB
// to gray by ITU-R 601-2 luma (Pillow's "L"); 16-bit colour keeps its high byte, 16-bit gray is
// clamped to 255 (Pillow's convert of its "I;16" mode).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ltrain::data {

struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
};

// `channels`: 1 or 3. `bytes` are the file's contents, `path` only names it in errors:
// UsageError "image '<path>' ..." for a file that is neither JPEG nor PNG, or is truncated or
// corrupt, or uses what ltrain does not decode (CMYK JPEG).
Image decodeImage(const uint8_t* bytes, size_t size, int channels, const std::string& path);
// Reads the file first (UsageError naming it when it cannot be read).
Image decodeImageFile(const std::string& path, int channels);

}  // namespace ltrain::data
