#include "ltrain/data/image_decode.h"

#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"

namespace ltrain::data {
namespace {

UsageError bad(const std::string& path, const std::string& why) {
  return UsageError(fmt::format("image '{}' {}", path, why));
}

// Pillow's RGB -> L: L = R * 299/1000 + G * 587/1000 + B * 114/1000, in its fixed point.
uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// Decoded samples with `have` channels (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA) to `want` (1, 3).
Image convert(const uint8_t* src, int64_t h, int64_t w, int have, int want) {
  Image im;
  im.height = h, im.width = w, im.channels = want;
  im.pixels.resize(static_cast<size_t>(h * w * want));
  uint8_t* dst = im.pixels.data();
  const bool color = have >= 3;
  for (int64_t i = 0; i < h * w; ++i, src += have, dst += want) {
    if (want == 1)
      dst[0] = color ? luma(src[0], src[1], src[2]) : src[0];
    else if (color)
      dst[0] = src[0], dst[1] = src[1], dst[2] = src[2];
    else
      dst[0] = dst[1] = dst[2] = src[0];
  }
  return im;
}

// Whether the file ends before its end-of-image marker: after the last start-of-scan marker
// (FF DA), entropy-coded data cannot hold FF D9 (an FF there is stuffed with 00), so EOI must
// follow it. (Searching from the start would find an EXIF thumbnail's own EOI.)
bool jpegCutShort(const uint8_t* b, size_t n) {
  size_t last_sos = 0, last_eoi = 0;
  for (size_t i = 0; i + 1 < n; ++i)
    if (b[i] == 0xff) {
      if (b[i + 1] == 0xda) last_sos = i + 1;
      if (b[i + 1] == 0xd9) last_eoi = i + 1;
    }
  return last_eoi < last_sos;
}

// libjpeg's reduction 1/denom for the smallest denom in {1, 2, 4, 8} with 1/denom >= min_scale.
int dctDenominator(const MinScale& min_scale, int h, int w) {
  if (!min_scale) return 1;
  const double s = min_scale(h, w);
  int denom = 1;
  while (denom < 8 && 1.0 / (2 * denom) >= s) denom *= 2;
  return denom;
}

Image decodeJpeg(const uint8_t* bytes, size_t size, int channels, const std::string& path,
                 const MinScale& min_scale) {
  tjhandle tj = tjInitDecompress();
  if (!tj) throw std::runtime_error("cannot start the JPEG decoder");
  struct Closer {
    tjhandle h;
    ~Closer() { tjDestroy(h); }
  } closer{tj};
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  auto* data = const_cast<unsigned char*>(bytes);
  const auto len = static_cast<unsigned long>(size);
  if (tjDecompressHeader3(tj, data, len, &w, &h, &subsamp, &colorspace) != 0)
    throw bad(path, fmt::format("is not a readable JPEG: {}", tjGetErrorStr2(tj)));
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw bad(path, "is a CMYK JPEG; ltrain decodes gray and RGB JPEGs (convert it to RGB)");
  if (w <= 0 || h <= 0 || static_cast<int64_t>(w) * h > (int64_t{1} << 28))
    throw bad(path, fmt::format("has an unreasonable size {}x{}", w, h));
  const int full_h = h, full_w = w, denom = dctDenominator(min_scale, h, w);
  w = (w + denom - 1) / denom, h = (h + denom - 1) / denom;  // TJSCALED
  Image im;
  im.height = h, im.width = w, im.channels = channels;
  im.full_height = full_h, im.full_width = full_w;
  im.pixels.resize(static_cast<size_t>(w) * h * channels);
  // Gray JPEGs decode straight to gray; a color one to RGB, then to luma as Pillow's "L" does
  // (libjpeg's own Y would differ by one here and there).
  const bool gray_file = colorspace == TJCS_GRAY;
  std::vector<uint8_t> rgb;
  uint8_t* out = im.pixels.data();
  int format = channels == 3 ? TJPF_RGB : TJPF_GRAY;
  if (channels == 1 && !gray_file) {
    rgb.resize(static_cast<size_t>(w) * h * 3);
    out = rgb.data(), format = TJPF_RGB;
  }
  // libjpeg's warnings (extraneous bytes before a marker, a short entropy segment) decode, as
  // Pillow decodes them; a fatal error or a file cut short (Pillow's "image file is truncated")
  // is an error, not a grey bottom half.
  if (tjDecompress2(tj, data, len, out, w, 0, h, format, 0) != 0 &&
      (tjGetErrorCode(tj) == TJERR_FATAL || jpegCutShort(bytes, size)))
    throw bad(path, fmt::format("is a corrupt or truncated JPEG: {}", tjGetErrorStr2(tj)));
  if (!rgb.empty()) {
    Image gray = convert(rgb.data(), h, w, 3, 1);
    gray.full_height = full_h, gray.full_width = full_w;
    return gray;
  }
  return im;
}

// libpng reports errors by longjmp: the reading happens in a function that owns nothing with a
// destructor, and its buffers are released by the caller's guard.
struct PngRead {
  const uint8_t* bytes;
  size_t size, pos;
  char error[256];
  uint8_t* pixels;  // malloc'd, height x width x channels
  png_bytepp rows;  // malloc'd; here, not a local: a local set after setjmp is lost by longjmp
  bool gray16;      // 16-bit gray read as is: Pillow's "I;16", clamped to 255 by its convert
  png_uint_32 width, height;
  int channels;
};

void pngError(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof r->error, "%s", msg);
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {}

void pngSource(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (r->size - r->pos < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, r->bytes + r->pos, n);
  r->pos += n;
}

bool readPng(PngRead* r) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, pngError, pngWarning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, r, pngSource);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (static_cast<uint64_t>(w) * h > (uint64_t{1} << 28)) png_error(png, "unreasonable size");
  // 8 bits a sample (the high byte, as Pillow reads 16-bit colour; 16-bit gray is clamped
  // below, as Pillow's convert clamps its "I;16"), palette to RGB, low-depth gray scaled to
  // 0..255; the tRNS chunk is left out, as Pillow's convert("RGB") leaves palette transparency.
  r->gray16 =
      png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) == 16;
  if (!r->gray16) png_set_strip_16(png);
  png_set_packing(png);
  if (png_get_color_type(png, info) == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (png_get_color_type(png, info) == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  r->width = w, r->height = h;
  r->channels = png_get_channels(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  if (stride != static_cast<size_t>(w) * r->channels * (r->gray16 ? 2 : 1))
    png_error(png, "unexpected row layout");
  r->pixels = static_cast<uint8_t*>(std::malloc(stride * h + 1));
  r->rows = static_cast<png_bytepp>(std::malloc(sizeof(png_bytep) * (h + 1)));
  if (!r->pixels || !r->rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y) r->rows[y] = r->pixels + y * stride;
  png_read_image(png, r->rows);
  // Not png_read_end: what follows the pixels (text chunks, IEND) may be missing, and Pillow
  // decodes such a file.
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Image decodePng(const uint8_t* bytes, size_t size, int channels, const std::string& path) {
  PngRead r{};
  r.bytes = bytes, r.size = size;
  struct Guard {
    PngRead& r;
    ~Guard() {
      std::free(r.pixels);
      std::free(r.rows);
    }
  } guard{r};
  if (!readPng(&r))
    throw bad(path, fmt::format("is a corrupt or truncated PNG: {}",
                                r.error[0] ? r.error : "libpng failed"));
  if (r.gray16)  // big-endian 16-bit samples, clamped to 8 bits in place
    for (size_t i = 0; i < static_cast<size_t>(r.width) * r.height; ++i) {
      const unsigned v = (unsigned{r.pixels[2 * i]} << 8) | r.pixels[2 * i + 1];
      r.pixels[i] = static_cast<uint8_t>(std::min(v, 255u));
    }
  Image im = convert(r.pixels, r.height, r.width, r.channels, channels);
  im.full_height = im.height, im.full_width = im.width;
  return im;
}

}  // namespace

Image decodeImage(const uint8_t* bytes, size_t size, int channels, const std::string& path,
                  const MinScale& min_scale) {
  if (channels != 1 && channels != 3)
    throw UsageError(fmt::format("data.channels is {}, expected 1 or 3", channels));
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(bytes, kPng, 8) == 0) return decodePng(bytes, size, channels, path);
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return decodeJpeg(bytes, size, channels, path, min_scale);
  throw bad(path, "is neither a JPEG nor a PNG file (by its first bytes)");
}

Image decodeImageFile(const std::string& path, int channels, const MinScale& min_scale) {
  std::string bytes;
  try {
    bytes = io::readFile(path);
  } catch (const std::exception& e) {
    throw bad(path, fmt::format("cannot be read: {}", e.what()));
  }
  return decodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), channels, path,
                     min_scale);
}

}  // namespace ltrain::data
