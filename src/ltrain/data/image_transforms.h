// torchvision's image transforms on decoded images, for image_folder and image_list:
// evaluation  Resize(resize) (the shorter side, antialiased bilinear) then CenterCrop(size);
// training    RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) and RandomHorizontalFlip,
//             drawn from a generator seeded per (seed, epoch, example): neither the number of
//             loader threads nor a resume changes them.
// Resizing is ATen's antialiased bilinear (what torchvision's tensor Resize(antialias=True) runs).
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "ltrain/data/image_decode.h"

namespace ltrain::data {

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// A counter-based generator (splitmix64) for one example's draws.
class ExampleRng {
 public:
  ExampleRng(uint64_t seed, int64_t epoch, int64_t example);
  double uniform();          // [0, 1)
  int64_t below(int64_t n);  // [0, n)
 private:
  uint64_t state_;
};

// torchvision's RandomResizedCrop.get_params: ten tries at a random area and aspect ratio, then
// the whole image's central crop clamped to the ratio range.
CropBox randomResizedCrop(int64_t height, int64_t width, ExampleRng& rng);

// uint8 [C, out_h, out_w]: `box` of the image resized to out_h x out_w.
torch::Tensor resizedCrop(const Image& im, const CropBox& box, int64_t out_h, int64_t out_w);
// Evaluation: the shorter side resized to `resize` (the longer one in proportion, truncated as
// torchvision does), then the central `size` x `size`. uint8 [C, size, size].
torch::Tensor evalTransform(const Image& im, int64_t resize, int64_t size);
// Training: a random resized crop to `size` x `size`, flipped half the time. The crop is drawn
// on the stored size (im.full_height x im.full_width) and mapped onto a DCT-scaled decode.
torch::Tensor trainTransform(const Image& im, int64_t size, ExampleRng& rng);

// The least decode scale each transform keeps its detail at (image_decode.h's MinScale): the
// shorter side still >= `resize`, or the random crop's sides still >= `size`.
double evalMinScale(int64_t height, int64_t width, int64_t resize);
double trainMinScale(int64_t height, int64_t width, int64_t size, ExampleRng rng);

}  // namespace ltrain::data
