// Incremental decoding for ltrain generate: the layers of gpt and llama that attend keep the keys
// and values of the tokens so far, so that each new token costs one position's work.
#pragma once
#include <torch/types.h>

namespace ltrain::models {

struct KvCache {
  torch::Tensor k, v;  // [B, kv_heads, T_so_far, head_size]; undefined before the first call
};

// A layer that needs the position of its input (embeddings with a position table, attention).
// Layers without it are position-wise and run their ordinary forward.
class CachedLayer {
 public:
  virtual ~CachedLayer() = default;
  // `x` holds positions [pos, pos + x.size(1)); `cache` the layer's keys and values before pos.
  virtual torch::Tensor forwardCached(const torch::Tensor& x, int64_t pos, KvCache& cache) = 0;
};

// Scaled dot-product attention of new queries [B, H, Tq, D] over all keys so far [B, Hkv, Tk, D]
// (Tk >= Tq, the queries being the last Tq positions), causal; with `window` > 0 each query sees
// only the last `window` positions up to its own (Mistral's sliding window).
torch::Tensor cachedAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double dropout, bool gqa, int64_t window = 0);

}  // namespace ltrain::models
