// Causal attention for training (queries and keys of the same positions) and for decoding with a
// cache (the queries are the last positions of the keys).
#include <torch/torch.h>

#include "ltrain/models/decoding.h"
#include "ltrain/models/packing.h"

namespace ltrain::models {

torch::Tensor cachedAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double dropout, bool gqa, int64_t window) {
  const int64_t tq = q.size(2), tk = k.size(2);
  if (const auto* packed = packedPositions(); packed && tq == tk)  // data.packing: per example
    return at::scaled_dot_product_attention(q, k, v, packedAttentionMask(window), dropout,
                                            /*is_causal=*/false,
                                            /*scale=*/std::nullopt, gqa);
  if (window > 0 && tk > window) {
    // Query i, at position tk - tq + i, sees keys (position - window, position]: transformers'
    // sliding window. Where every key is in reach, the causal paths below are the same.
    auto mask = torch::ones({tq, tk}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
                    .tril(tk - tq)
                    .triu(tk - tq - window + 1);
    return at::scaled_dot_product_attention(q, k, v, mask, dropout, /*is_causal=*/false,
                                            /*scale=*/std::nullopt, gqa);
  }
  if (tq == tk)
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, gqa);
  // Query i is position tk - tq + i: it sees keys up to there. (SDPA's is_causal aligns the
  // mask's top-left corner, which is right only when tq == tk.) One query sees every key.
  std::optional<torch::Tensor> mask;
  if (tq > 1)
    mask = torch::ones({tq, tk}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
               .tril(tk - tq);
  return at::scaled_dot_product_attention(q, k, v, mask, dropout, /*is_causal=*/false,
                                          /*scale=*/std::nullopt, gqa);
}

}  // namespace ltrain::models
