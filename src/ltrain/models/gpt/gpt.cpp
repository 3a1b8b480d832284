// A decoder-only transformer (GPT-2's block: pre-norm, causal self-attention through
// scaled_dot_product_attention, a 4x GELU MLP), laid out in the "layers" Sequential like every
// ltrain model so that it splits into pipeline stages: layers.0 embeds tokens and positions,
// layers.1..n_layer are the blocks, then the final LayerNorm and the language-model head. Inside
// each block the names are nanoGPT's (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj); bench/reference/gpt_ref.py builds the same module in Python.
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>

#include "ltrain/common/errors.h"
#include "ltrain/models/activation_checkpoint.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/decoding.h"
#include "ltrain/models/layers.h"
#include "ltrain/models/packing.h"
#include "ltrain/models/parallel_modules.h"

namespace ltrain::models {
namespace {

namespace F = torch::nn::functional;

// Each module is Cloneable (reset() registers its parts again) so that dist.strategy=dp can
// replicate the model onto every GPU. Embedding and Block are CachedLayers: ltrain generate runs
// them position by position with a cache of keys and values. Their linears and tables are
// models/parallel_modules.h's, which dist.tensor_parallel splits from outside (the spec's plan).
struct TokensAndPositionsImpl : torch::nn::Cloneable<TokensAndPositionsImpl>, CachedLayer {
  TokensAndPositionsImpl(int64_t vocab, int64_t block_size, int64_t n_embd, double dropout)
      : vocab(vocab), block_size(block_size), n_embd(n_embd), dropout(dropout) {
    reset();
  }
  void reset() override {
    // torch::nn::Embedding's tables, for their N(0, 1) draws (GPT-2's initialisation follows).
    wte = register_module("wte", Embedding(torch::nn::EmbeddingImpl(vocab, n_embd).weight));
    wpe = register_module("wpe", Embedding(torch::nn::EmbeddingImpl(block_size, n_embd).weight));
    drop = register_module("drop", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(torch::Tensor idx) { return embed(idx, 0); }
  torch::Tensor forwardCached(const torch::Tensor& idx, int64_t pos, KvCache&) override {
    return embed(idx, pos);
  }
  torch::Tensor embed(const torch::Tensor& idx, int64_t first) {
    const int64_t t = idx.size(1);
    TORCH_CHECK(first + t <= block_size, "sequence of ", first + t,
                " tokens is longer than model.block_size ", block_size);
    if (const auto* packed = packedPositions(); packed && first == 0)  // each example from 0
      return drop(wte(idx) + wpe(*packed));
    auto pos = torch::arange(first, first + t,
                             torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    return drop(wte(idx) + wpe(pos));
  }
  int64_t vocab, block_size, n_embd;
  double dropout;
  Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(TokensAndPositions);

struct CausalSelfAttentionImpl : torch::nn::Cloneable<CausalSelfAttentionImpl> {
  CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head, double dropout)
      : n_embd(n_embd), head_size(n_embd / n_head), dropout(dropout) {
    reset();
  }
  void reset() override {
    c_attn = register_module("c_attn", Linear(n_embd, 3 * n_embd));  // q, k, v one after another
    c_proj = register_module("c_proj", Linear(n_embd, n_embd));
    resid_drop = register_module("resid_drop", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(torch::Tensor input, KvCache* cache = nullptr) {
    const auto fused = c_attn(input);
    const int64_t b = fused.size(0), t = fused.size(1), c = fused.size(2) / 3;
    auto qkv = fused.split(c, 2);
    auto heads = [&](const torch::Tensor& y) {  // the heads this module holds: c / head_size
      return y.view({b, t, c / head_size, head_size}).transpose(1, 2);  // [B, nh, T, hs]
    };
    auto k = heads(qkv[1]), v = heads(qkv[2]);
    if (cache) {
      if (cache->k.defined()) k = torch::cat({cache->k, k}, 2), v = torch::cat({cache->v, v}, 2);
      cache->k = k, cache->v = v;
    }
    auto y = cachedAttention(heads(qkv[0]), k, v, is_training() ? dropout : 0.0, /*gqa=*/false);
    return resid_drop(c_proj(y.transpose(1, 2).contiguous().view({b, t, c})));
  }
  int64_t n_embd, head_size;
  double dropout;
  Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_drop{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Cloneable<MlpImpl> {
  MlpImpl(int64_t n_embd, double dropout, bool tanh_gelu)
      : n_embd(n_embd), dropout(dropout), tanh_gelu(tanh_gelu) {
    reset();
  }
  void reset() override {
    c_fc = register_module("c_fc", Linear(n_embd, 4 * n_embd));
    c_proj = register_module("c_proj", Linear(4 * n_embd, n_embd));
    drop = register_module("drop", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = F::gelu(c_fc(x), F::GELUFuncOptions().approximate(tanh_gelu ? "tanh" : "none"));
    return drop(c_proj(h));
  }
  int64_t n_embd;
  double dropout;
  bool tanh_gelu;
  Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Cloneable<BlockImpl>, CachedLayer, RepeatedBlock {
  BlockImpl(int64_t n_embd, int64_t n_head, double dropout, bool tanh_gelu)
      : n_embd(n_embd), n_head(n_head), dropout(dropout), tanh_gelu(tanh_gelu) {
    reset();
  }
  void reset() override {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    attn = register_module("attn", CausalSelfAttention(n_embd, n_head, dropout));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
    mlp = register_module("mlp", Mlp(n_embd, dropout, tanh_gelu));
  }
  torch::Tensor forward(torch::Tensor x) { return run(x, nullptr); }
  torch::Tensor forwardCached(const torch::Tensor& x, int64_t, KvCache& cache) override {
    return run(x, &cache);
  }
  torch::Tensor run(torch::Tensor x, KvCache* cache) {
    x = x + attn->forward(ln_1(x), cache);
    return x + mlp(ln_2(x));
  }
  int64_t n_embd, n_head;
  double dropout;
  bool tanh_gelu;
  torch::nn::LayerNorm ln_1{nullptr};
  CausalSelfAttention attn{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

Layerwise gptLayers(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                    int64_t vocab) {
  if (shape.size() != 1)
    throw UsageError(fmt::format(
        "model gpt: expected token sequences (data.dataset: text), got inputs of {} dimensions",
        shape.size()));
  if (cfg.n_embd % cfg.n_head != 0)
    throw UsageError(fmt::format("model.n_embd ({}) must be a multiple of model.n_head ({})",
                                 cfg.n_embd, cfg.n_head));
  if (shape[0] > cfg.block_size)
    throw UsageError(fmt::format("model gpt: sequences of {} tokens exceed model.block_size {}",
                                 shape[0], cfg.block_size));
  Layerwise f;
  using Built = const torch::nn::Sequential&;
  f.layers.emplace_back([=](Built) {
    return torch::nn::AnyModule(TokensAndPositions(vocab, cfg.block_size, cfg.n_embd, cfg.dropout));
  });
  for (int64_t i = 0; i < cfg.n_layer; ++i)
    f.layers.emplace_back([=](Built) {
      return torch::nn::AnyModule(
          Block(cfg.n_embd, cfg.n_head, cfg.dropout, cfg.gelu == config::Gelu::kTanh));
    });
  f.layers.emplace_back([=](Built) {
    return torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.n_embd})));
  });
  f.layers.emplace_back([=](Built built) {
    return torch::nn::AnyModule(
        LmHead(cfg.n_embd, vocab,
               cfg.tie_weights ? built->ptr<TokensAndPositionsImpl>(0)->wte : Embedding(nullptr)));
  });

  // GPT-2's initialisation: N(0, 0.02) for matrices and embeddings, zero biases, and the residual
  // projections scaled by 1/sqrt(2 n_layer) so that the residual stream's variance does not grow
  // with depth.
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  const auto final_norm = static_cast<size_t>(cfg.n_layer + 1);
  f.init = [proj_std, final_norm](size_t layer, torch::nn::Module& m) {
    if (layer == final_norm) return;  // LayerNorms keep ones and zeros
    for (auto& item : m.named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& p = item.value();
      const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      if (name.rfind("ln_", 0) == 0) continue;
      if (bias)
        p.zero_();
      else if (name.find("c_proj.weight") != std::string::npos)
        p.normal_(0.0, proj_std);
      else
        p.normal_(0.0, 0.02);
    }
  };
  return f;
}

}  // namespace ltrain::models

namespace ltrain::models::gpt {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = gptLayers;
  return b;
}

}  // namespace ltrain::models::gpt
