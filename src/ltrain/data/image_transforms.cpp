#include "ltrain/data/image_transforms.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace ltrain::data {
namespace {

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

ExampleRng::ExampleRng(uint64_t seed, int64_t epoch, int64_t example) : state_(seed) {
  // Each input mixed in turn, so that (seed, epoch, example) tuples give unrelated streams.
  state_ = splitmix(state_) ^ static_cast<uint64_t>(epoch);
  state_ = splitmix(state_) ^ static_cast<uint64_t>(example);
  splitmix(state_);
}

double ExampleRng::uniform() {
  return static_cast<double>(splitmix(state_) >> 11) * 0x1.0p-53;
}

int64_t ExampleRng::below(int64_t n) {
  return std::min<int64_t>(n - 1, static_cast<int64_t>(uniform() * static_cast<double>(n)));
}

CropBox randomResizedCrop(int64_t height, int64_t width, ExampleRng& rng) {
  constexpr double kScaleMin = 0.08, kScaleMax = 1.0;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  const double area = static_cast<double>(height * width);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (kScaleMin + (kScaleMax - kScaleMin) * rng.uniform());
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
    const auto w = static_cast<int64_t>(std::lround(std::sqrt(target * ratio)));
    const auto h = static_cast<int64_t>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height)
      return {rng.below(height - h + 1), rng.below(width - w + 1), h, w};
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < 3.0 / 4.0)
    h = static_cast<int64_t>(std::lround(static_cast<double>(w) / (3.0 / 4.0)));
  else if (in_ratio > 4.0 / 3.0)
    w = static_cast<int64_t>(std::lround(static_cast<double>(h) * (4.0 / 3.0)));
  h = std::min(h, height), w = std::min(w, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

torch::Tensor resizedCrop(const Image& im, const CropBox& box, int64_t out_h, int64_t out_w) {
  auto hwc = at::from_blob(const_cast<uint8_t*>(im.pixels.data()),
                           {im.height, im.width, im.channels}, at::kByte);
  // The crop as a [1, C, h, w] view of the HWC pixels (channels-last strides), resized by ATen's
  // uint8 kernel: vectorised for 1-4 channels, 2.4x faster here than the float one, and closer
  // to Pillow (what torchvision's uint8 tensor Resize runs).
  auto x = hwc.narrow(0, box.top, box.height)
               .narrow(1, box.left, box.width)
               .permute({2, 0, 1})
               .unsqueeze(0);
  if (box.height != out_h || box.width != out_w)
    return at::_upsample_bilinear2d_aa(x, {out_h, out_w}, /*align_corners=*/false).squeeze(0);
  // A copy: a view would outlive the decoded pixels it points into (contiguous() returns the
  // view itself for one channel).
  return x.squeeze(0).clone(at::MemoryFormat::Contiguous);
}

torch::Tensor evalTransform(const Image& im, int64_t resize, int64_t size) {
  // torchvision's Resize(int): the shorter side becomes `resize`, the other int(resize * long /
  // short); CenterCrop: offsets int(round((dim - size) / 2)).
  const bool tall = im.height >= im.width;
  const int64_t short_side = tall ? im.width : im.height, long_side = tall ? im.height : im.width;
  const auto other =
      static_cast<int64_t>(static_cast<double>(resize) * static_cast<double>(long_side) /
                           static_cast<double>(short_side));
  const int64_t rh = tall ? other : resize, rw = tall ? resize : other;
  auto x = resizedCrop(im, {0, 0, im.height, im.width}, rh, rw);
  if (rh < size || rw < size)  // CenterCrop pads a smaller image with zeros
    x = at::constant_pad_nd(
        x, {std::max<int64_t>(0, (size - rw) / 2), std::max<int64_t>(0, (size - rw + 1) / 2),
            std::max<int64_t>(0, (size - rh) / 2), std::max<int64_t>(0, (size - rh + 1) / 2)});
  // Python's round: halves to even.
  const auto top =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(x.size(1) - size) / 2.0));
  const auto left =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(x.size(2) - size) / 2.0));
  return x.narrow(1, top, size).narrow(2, left, size);
}

torch::Tensor trainTransform(const Image& im, int64_t size, ExampleRng& rng) {
  // Drawn on the stored size, so that a DCT-scaled decode crops the same part of the picture.
  const int64_t fh = im.full_height > 0 ? im.full_height : im.height;
  const int64_t fw = im.full_width > 0 ? im.full_width : im.width;
  CropBox box = randomResizedCrop(fh, fw, rng);
  if (fh != im.height || fw != im.width) {
    const double sy = static_cast<double>(im.height) / static_cast<double>(fh);
    const double sx = static_cast<double>(im.width) / static_cast<double>(fw);
    box.top = std::min(im.height - 1, static_cast<int64_t>(static_cast<double>(box.top) * sy));
    box.left = std::min(im.width - 1, static_cast<int64_t>(static_cast<double>(box.left) * sx));
    box.height = std::clamp<int64_t>(std::lround(static_cast<double>(box.height) * sy), 1,
                                     im.height - box.top);
    box.width = std::clamp<int64_t>(std::lround(static_cast<double>(box.width) * sx), 1,
                                    im.width - box.left);
  }
  auto x = resizedCrop(im, box, size, size);
  return rng.uniform() < 0.5 ? x.flip({2}) : x;
}

double evalMinScale(int64_t height, int64_t width, int64_t resize) {
  return static_cast<double>(resize) / static_cast<double>(std::min(height, width));
}

double trainMinScale(int64_t height, int64_t width, int64_t size, ExampleRng rng) {
  // The same draws trainTransform makes next (the generator is a copy).
  const CropBox box = randomResizedCrop(height, width, rng);
  return static_cast<double>(size) / static_cast<double>(std::min(box.height, box.width));
}

}  // namespace ltrain::data
