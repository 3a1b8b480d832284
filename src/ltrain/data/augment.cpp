#include "ltrain/data/augment.h"

#include <torch/torch.h>

namespace ltrain::data {
namespace {

// splitmix64: a cheap, well-mixed step from one 64-bit seed to the next.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t augmentSeed(uint64_t seed, int64_t rank, int64_t epoch) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(epoch));
}

torch::Tensor augmentBatch(const torch::Tensor& x, const Augment& a, int64_t batch_index) {
  if (!a.crop_flip || x.dim() != 4) return x;
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(mix(a.seed ^ static_cast<uint64_t>(batch_index)));
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3), p = a.pad;
  auto offsets = torch::randint(0, 2 * p + 1, {n, 2}, gen, torch::kLong);
  auto flips = torch::rand({n}, gen, torch::kFloat).lt(0.5);
  auto padded = torch::constant_pad_nd(x, {p, p, p, p}, 0.0);
  auto out = torch::empty_like(x);
  const auto* off = offsets.data_ptr<int64_t>();
  const auto* flip = flips.data_ptr<bool>();
  for (int64_t i = 0; i < n; ++i) {
    auto crop = padded[i].narrow(1, off[2 * i], h).narrow(2, off[2 * i + 1], w);
    out[i].copy_(flip[i] ? crop.flip({2}) : crop);
  }
  return out;
}

}  // namespace ltrain::data
