// Training-time image augmentation, applied by whichever thread builds a batch: a random crop of
// the image padded by `pad` zero pixels a side (the image size is kept) and a horizontal flip with
// probability 1/2. The draws of batch b come from a generator seeded by (seed, b), and the trainer
// derives `seed` from (train seed, rank, epoch): the same examples get the same crops whatever the
// number of loader workers, and a resumed epoch repeats them exactly.
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace ltrain::data {

struct Augment {
  bool crop_flip = false;
  int64_t pad = 4;
  uint64_t seed = 0;
};

// `x` is a batch [B, C, H, W] as stored (uint8 or float, before normalisation); returns the
// augmented batch (x itself when off).
torch::Tensor augmentBatch(const torch::Tensor& x, const Augment& a, int64_t batch_index);

// The seed of one rank's epoch, spread so that neighbouring ranks and epochs do not correlate.
uint64_t augmentSeed(uint64_t seed, int64_t rank, int64_t epoch);

}  // namespace ltrain::data
