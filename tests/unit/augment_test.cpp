// crop_flip augmentation: each output is a crop of the zero-padded image, flipped or not; the
// draws depend on the seed and the batch index only (not on the number of loader workers).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "ltrain/data/augment.h"
#include "ltrain/data/loader.h"

using ltrain::data::Augment;
using ltrain::data::augmentBatch;

namespace {
// Whether `out` is some crop of `in` padded by p, possibly flipped.
bool isCropOf(const torch::Tensor& out, const torch::Tensor& in, int64_t p) {
  auto padded = torch::constant_pad_nd(in, {p, p, p, p}, 0.0);
  const int64_t h = in.size(1), w = in.size(2);
  for (int64_t dy = 0; dy <= 2 * p; ++dy)
    for (int64_t dx = 0; dx <= 2 * p; ++dx) {
      auto crop = padded.narrow(1, dy, h).narrow(2, dx, w);
      if (torch::equal(out, crop) || torch::equal(out, crop.flip({2}))) return true;
    }
  return false;
}
}  // namespace

TEST_CASE("crop_flip crops the padded image and flips half the time, reproducibly") {
  torch::manual_seed(0);
  auto x = torch::rand({64, 2, 6, 6}) + 1;                // no zeros, so padding shows
  CHECK(torch::equal(augmentBatch(x, Augment{}, 0), x));  // off
  Augment a{true, 2, 1234};
  auto y = augmentBatch(x, a, 7);
  auto z = augmentBatch(x, Augment{true, 0, 5}, 3);  // pad 0: only flips
  int flipped = 0, shifted = 0;
  for (int64_t i = 0; i < 64; ++i) {
    REQUIRE(isCropOf(y[i], x[i], 2));
    shifted += !torch::equal(y[i], x[i]) && !torch::equal(y[i], x[i].flip({2}));
    const bool f = torch::equal(z[i], x[i].flip({2}));
    CHECK((f || torch::equal(z[i], x[i])));
    flipped += f;
  }
  CHECK(shifted > 40);                                  // 24 of 25 offsets move the image
  CHECK((flipped > 16 && flipped < 48));                // about half
  CHECK(torch::equal(augmentBatch(x, a, 7), y));        // same seed and batch: same draws
  CHECK_FALSE(torch::equal(augmentBatch(x, a, 8), y));  // another batch: other draws
  CHECK(ltrain::data::augmentSeed(1, 0, 0) != ltrain::data::augmentSeed(1, 0, 1));
  CHECK(ltrain::data::augmentSeed(1, 0, 0) != ltrain::data::augmentSeed(1, 1, 0));
}

TEST_CASE("augmented batches do not depend on the number of loader workers") {
  ltrain::data::Dataset ds;
  ds.inputs = torch::rand({40, 1, 5, 5});
  ds.targets = torch::zeros({40}, torch::kLong);
  std::vector<int64_t> order(40);
  std::iota(order.begin(), order.end(), 0);
  Augment a{true, 1, 99};
  ltrain::data::Loader serial(ds, order, 8, false, 0, 2, 0, false, a);
  ltrain::data::Loader threaded(ds, order, 8, false, 2, 2, 0, false, a);
  ltrain::data::Batch b1, b2;
  int batches = 0;
  while (serial.next(b1)) {
    REQUIRE(threaded.next(b2));
    CHECK(torch::equal(b1.inputs, b2.inputs));
    ++batches;
  }
  CHECK(batches == 5);
}
