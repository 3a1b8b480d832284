// model.name llama: Llama's decoder (pre-norm RMSNorm, rotary position embeddings, a SwiGLU MLP,
// grouped-query causal attention, no biases), with the parameter names of Hugging Face
// transformers' LlamaForCausalLM (model.embed_tokens.weight,
// model.layers.0.self_attn.q_proj.weight,
// ..., model.norm.weight, lm_head.weight), so that its checkpoints load and export as they are.
// It runs as every ltrain model does, layer after layer of one Sequential (embedding, decoder
// layers, norm, head), which pipelines split; the names come from a second tree over the same
// modules. Each computation follows transformers' modeling_llama.py (the RMSNorm in float32, the
// rotary tables as it builds them), so that logits agree; bench/reference/llama_ref.py is the
// Python twin that the parity tests train.
#include <fmt/format.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "ltrain/common/errors.h"
#include "ltrain/models/activation_checkpoint.h"
#include "ltrain/models/builder.h"
#include "ltrain/models/decoding.h"
#include "ltrain/models/llama/llama.h"
#include "ltrain/models/llama/spec.h"
#include "ltrain/models/model.h"
#include "ltrain/models/packing.h"
#include "ltrain/models/parallel_modules.h"

namespace ltrain::models {
namespace {

namespace F = torch::nn::functional;

Linear linear(int64_t in, int64_t out) {
  return Linear(in, out, /*bias=*/false);
}

// The linears and tables are models/parallel_modules.h's, which dist.tensor_parallel splits from
// outside (the spec's plan); a module then holds 1/tp of the heads and infers how many.

// cos and sin of every position's rotation, [positions, head_size], built once per device and
// grown when a longer sequence comes (generation past block_size).
class RotaryTables {
 public:
  RotaryTables(int64_t head_size, double theta) : head_size_(head_size), theta_(theta) {}
  std::pair<torch::Tensor, torch::Tensor> get(int64_t pos, int64_t t, const torch::Device& d) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& tab = by_device_[d.str()];
    if (!tab.first.defined() || tab.first.size(0) < pos + t) {
      const int64_t n =
          std::max<int64_t>(pos + t, 2 * (tab.first.defined() ? tab.first.size(0) : 0));
      // transformers: inv_freq = 1 / theta^(arange(0, d, 2) / d) and freqs = positions x inv_freq,
      // in float32; the table repeats the frequencies for both halves of the head.
      auto inv =
          1.0 / torch::pow(theta_, torch::arange(0, head_size_, 2, torch::kLong).to(torch::kFloat) /
                                       static_cast<double>(head_size_));
      auto freqs = torch::outer(torch::arange(n, torch::kLong).to(torch::kFloat), inv);
      auto emb = torch::cat({freqs, freqs}, -1);
      tab = {emb.cos().to(d), emb.sin().to(d)};
    }
    return {tab.first.narrow(0, pos, t), tab.second.narrow(0, pos, t)};
  }

 private:
  int64_t head_size_;
  double theta_;
  std::mutex mu_;
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> by_device_;
};

torch::Tensor rotateHalf(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

torch::Tensor applyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  return x * cos + rotateHalf(x) * sin;
}

struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t n, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({n}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * h.to(x.scalar_type());
  }
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const config::ModelConfig& c, const LlamaBlock& block,
                std::shared_ptr<RotaryTables> rotary)
      : head_size(llama::headDim(c)),
        window(block.sliding_window),
        dropout(c.dropout),
        rotary(std::move(rotary)) {
    const int64_t n_head = c.n_head, n_kv_head = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
    q_proj = register_module("q_proj", linear(c.n_embd, n_head * head_size));
    k_proj = register_module("k_proj", linear(c.n_embd, n_kv_head * head_size));
    v_proj = register_module("v_proj", linear(c.n_embd, n_kv_head * head_size));
    o_proj = register_module("o_proj", linear(n_head * head_size, c.n_embd));
    if (block.qk_norm) {  // Qwen3: each head's query and key normalised before the rotation
      q_norm = register_module("q_norm", RmsNorm(head_size, c.norm_eps));
      k_norm = register_module("k_norm", RmsNorm(head_size, c.norm_eps));
    }
  }
  torch::Tensor forward(const torch::Tensor& input, int64_t pos, KvCache* cache) {
    const auto qkv = linearsOf(input, {q_proj, k_proj, v_proj});
    const int64_t b = qkv[0].size(0), t = qkv[0].size(1);
    auto heads = [&](const torch::Tensor& y) {  // the heads this module holds
      return y.view({b, t, y.size(2) / head_size, head_size}).transpose(1, 2);  // [B, n, T, hs]
    };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    if (q_norm) q = q_norm(q), k = k_norm(k);
    auto [cos, sin] = rotary->get(pos, t, input.device());
    if (const auto* packed = packedPositions(); packed && !cache) {  // each example from 0
      const auto at = packed->reshape({-1});
      cos = cos.index_select(0, at).view({b, 1, t, head_size});
      sin = sin.index_select(0, at).view({b, 1, t, head_size});
    }
    q = applyRotary(q, cos.to(q.scalar_type()), sin.to(q.scalar_type()));
    k = applyRotary(k, cos.to(k.scalar_type()), sin.to(k.scalar_type()));
    if (cache) {
      if (cache->k.defined()) k = torch::cat({cache->k, k}, 2), v = torch::cat({cache->v, v}, 2);
      cache->k = k, cache->v = v;
    }
    const bool gqa = k.size(1) != q.size(1);
    auto y = cachedAttention(q, k, v, is_training() ? dropout : 0.0, gqa, window);
    return o_proj(y.transpose(1, 2).contiguous().view({b, t, q.size(1) * head_size}));
  }
  int64_t head_size;
  int64_t window;  // keys a query sees; 0: all before it
  double dropout;
  std::shared_ptr<RotaryTables> rotary;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(Attention);

struct SwiGluImpl : torch::nn::Module {
  SwiGluImpl(int64_t n_embd, int64_t hidden) {
    gate_proj = register_module("gate_proj", linear(n_embd, hidden));
    up_proj = register_module("up_proj", linear(n_embd, hidden));
    down_proj = register_module("down_proj", linear(hidden, n_embd));
  }
  torch::Tensor forward(const torch::Tensor& input) {
    const auto gate_up = linearsOf(input, {gate_proj, up_proj});
    return down_proj(F::silu(gate_up[0]) * gate_up[1]);
  }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(SwiGlu);

struct DecoderLayerImpl : torch::nn::Module, CachedLayer, RepeatedBlock {
  DecoderLayerImpl(const config::ModelConfig& c, const LlamaBlock& block,
                   std::shared_ptr<RotaryTables> rotary) {
    self_attn = register_module("self_attn", Attention(c, block, std::move(rotary)));
    if (block.moe.experts > 0)
      moe = register_module(block.moe.block, MoeBlock(c.n_embd, block.moe));
    else
      mlp = register_module("mlp", SwiGlu(c.n_embd, c.intermediate_size));
    input_layernorm = register_module("input_layernorm", RmsNorm(c.n_embd, c.norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", RmsNorm(c.n_embd, c.norm_eps));
  }
  torch::Tensor forward(const torch::Tensor& x) { return run(x, 0, nullptr); }
  torch::Tensor forwardCached(const torch::Tensor& x, int64_t pos, KvCache& cache) override {
    return run(x, pos, &cache);
  }
  torch::Tensor run(torch::Tensor x, int64_t pos, KvCache* cache) {
    x = x + self_attn->forward(input_layernorm(x), pos, cache);
    const auto h = post_attention_layernorm(x);
    return x + (moe ? moe(h) : mlp(h));
  }
  Attention self_attn{nullptr};
  SwiGlu mlp{nullptr};
  MoeBlock moe{nullptr};
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

}  // namespace

Layerwise llamaLayers(const config::ModelConfig& cfg, const std::vector<int64_t>& shape,
                      int64_t vocab, LlamaBlock block) {
  if (shape.size() != 1)
    throw UsageError(fmt::format(
        "model {}: expected token sequences (data.dataset: text or tokens), got inputs of {} "
        "dimensions",
        cfg.name, shape.size()));
  if (shape[0] > cfg.block_size)
    throw UsageError(fmt::format("model {}: sequences of {} tokens exceed model.block_size {}",
                                 cfg.name, shape[0], cfg.block_size));
  const int64_t head_size = llama::headDim(cfg);
  auto rotary = std::make_shared<RotaryTables>(head_size, cfg.rope_theta);
  Layerwise f;
  using Built = const torch::nn::Sequential&;
  f.layers.emplace_back([=](Built) {
    return torch::nn::AnyModule(Embedding(torch::empty({vocab, cfg.n_embd})));
  });
  for (int64_t i = 0; i < cfg.n_layer; ++i)
    f.layers.emplace_back(
        [=](Built) { return torch::nn::AnyModule(DecoderLayer(cfg, block, rotary)); });
  f.layers.emplace_back(
      [=](Built) { return torch::nn::AnyModule(RmsNorm(cfg.n_embd, cfg.norm_eps)); });
  f.layers.emplace_back([=](Built built) {
    return torch::nn::AnyModule(LmHead(
        cfg.n_embd, vocab, cfg.tie_weights ? Embedding(built->ptr<EmbeddingImpl>(0)) : nullptr));
  });
  // transformers' LlamaPreTrainedModel: N(0, 0.02) for every matrix and the embedding (Mixtral's:
  // the routers and experts too); the norms keep their ones.
  f.init = [](size_t, torch::nn::Module& m) {
    for (auto& p : m.parameters())
      if (p.dim() == 2) p.normal_(0.0, 0.02);
  };
  // The layers under transformers' names: model.embed_tokens, model.layers.<i>, model.norm,
  // lm_head (unless tied).
  f.wrap = [n_layer = cfg.n_layer, tied = cfg.tie_weights](torch::nn::Sequential seq) {
    auto named = std::make_shared<torch::nn::Module>();
    auto blocks = std::make_shared<torch::nn::Module>();
    std::vector<std::string> prefixes;
    named->register_module("embed_tokens", seq->ptr(0));
    prefixes.push_back("model.embed_tokens.");
    for (int64_t i = 0; i < n_layer; ++i) {
      blocks->register_module(std::to_string(i), seq->ptr(static_cast<size_t>(i + 1)));
      prefixes.push_back(fmt::format("model.layers.{}.", i));
    }
    named->register_module("layers", blocks);
    named->register_module("norm", seq->ptr(static_cast<size_t>(n_layer + 1)));
    prefixes.push_back("model.norm.");
    prefixes.push_back("lm_head.");
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> tree{{"model", named}};
    if (!tied) tree.emplace_back("lm_head", seq->ptr(static_cast<size_t>(n_layer + 2)));
    return Classifier(seq, std::move(tree), std::move(prefixes));
  };
  return f;
}

namespace llama {

ModelBuilder builder() {
  ModelBuilder b;
  b.layers = [](const config::ModelConfig& cfg, const std::vector<int64_t>& shape, int64_t vocab) {
    return llamaLayers(cfg, shape, vocab, {});
  };
  return b;
}

}  // namespace llama

}  // namespace ltrain::models
