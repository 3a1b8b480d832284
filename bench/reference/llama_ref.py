"""ltrain's llama (src/ltrain/models/llama.cpp) on the Python side, under transformers' parameter
names (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ...):

- llama_model(m, vocab): transformers' own LlamaForCausalLM where transformers is installed (the
  parity tests), else EagerLlama;
- EagerLlama: the same network in plain PyTorch, for machines without transformers (the GPU
  benchmark's PyTorch-eager side). tests/parity/hf_parity_test.cpp checks that its logits are
  transformers'.

forward(ids) gives the logits; weights()/load_weights() hold a tied head once, as ltrain saves it.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.n_head, self.n_kv = m["n_head"], m["n_kv_head"] or m["n_head"]
        self.hs = m["n_embd"] // m["n_head"]
        self.dropout = m["dropout"]
        self.q_proj = nn.Linear(m["n_embd"], self.n_head * self.hs, bias=False)
        self.k_proj = nn.Linear(m["n_embd"], self.n_kv * self.hs, bias=False)
        self.v_proj = nn.Linear(m["n_embd"], self.n_kv * self.hs, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.hs, m["n_embd"], bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_head, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.hs).transpose(1, 2)
        q = q * cos.to(q.dtype) + rotate_half(q) * sin.to(q.dtype)
        k = k * cos.to(k.dtype) + rotate_half(k) * sin.to(k.dtype)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True, enable_gqa=self.n_kv != self.n_head)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.gate_proj = nn.Linear(m["n_embd"], m["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(m["n_embd"], m["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(m["intermediate_size"], m["n_embd"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.self_attn = Attention(m)
        self.mlp = Mlp(m)
        self.input_layernorm = RMSNorm(m["n_embd"], m["norm_eps"])
        self.post_attention_layernorm = RMSNorm(m["n_embd"], m["norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, m["n_embd"])
        self.layers = nn.ModuleList(DecoderLayer(m) for _ in range(m["n_layer"]))
        self.norm = RMSNorm(m["n_embd"], m["norm_eps"])


class EagerLlama(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        self.tied = m["tie_weights"]
        self.model = Decoder(m, vocab)
        if not self.tied:
            self.lm_head = nn.Linear(m["n_embd"], vocab, bias=False)
        hs = m["n_embd"] // m["n_head"]
        # transformers' rotary tables: inv_freq = 1 / theta^(arange(0, d, 2) / d), float32.
        self.register_buffer("inv_freq", 1.0 / (m["rope_theta"] ** (torch.arange(0, hs, 2).float() / hs)),
                             persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, device=ids.device).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight if self.tied else self.lm_head.weight)

    def weights(self):
        return self.state_dict()

    def load_weights(self, sd):
        self.load_state_dict(sd, strict=True)


def llama_config(m, vocab):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=vocab, hidden_size=m["n_embd"], intermediate_size=m["intermediate_size"],
                       num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
                       num_key_value_heads=m["n_kv_head"] or m["n_head"],
                       head_dim=m["n_embd"] // m["n_head"], max_position_embeddings=m["block_size"],
                       rms_norm_eps=m["norm_eps"], rope_theta=m["rope_theta"],
                       tie_word_embeddings=m["tie_weights"], attention_dropout=m["dropout"],
                       attention_bias=False, mlp_bias=False, hidden_act="silu",
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)


def transformers_llama(m, vocab):
    from transformers import LlamaForCausalLM

    class LlamaRef(LlamaForCausalLM):
        def forward(self, ids):
            return super().forward(input_ids=ids, use_cache=False).logits

        def weights(self):
            sd = self.state_dict()
            if self.config.tie_word_embeddings:
                sd.pop("lm_head.weight", None)
            return sd

        def load_weights(self, sd):
            missing, unexpected = self.load_state_dict(sd, strict=False)
            allowed = {"lm_head.weight"} if self.config.tie_word_embeddings else set()
            if set(missing) - allowed or unexpected:
                raise KeyError(f"weights do not match: missing {missing}, unexpected {unexpected}")
            if self.config.tie_word_embeddings:
                self.tie_weights()

    model = LlamaRef(llama_config(m, vocab))
    model.config._attn_implementation = "sdpa"
    return model


def llama_model(m, vocab):
    try:
        import transformers  # noqa: F401
    except ImportError:
        return EagerLlama(m, vocab)
    return transformers_llama(m, vocab)


def transformers_moe(m, vocab):
    """ltrain's mixtral and qwen3_moe: transformers' MixtralForCausalLM and Qwen3MoeForCausalLM.
    forward(ids) keeps the routers' load-balancing loss in last_aux. Their experts are held fused
    ([experts, 2 x width, n_embd]); weights in the checkpoints' names (ltrain's) go in and out
    through save_pretrained and from_pretrained, so transformers converts them itself."""
    import tempfile
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, \
        Qwen3MoeForCausalLM
    common = dict(vocab_size=vocab, hidden_size=m["n_embd"], intermediate_size=m["intermediate_size"],
                  num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
                  num_key_value_heads=m["n_kv_head"] or m["n_head"],
                  head_dim=m["head_dim"] or m["n_embd"] // m["n_head"],
                  max_position_embeddings=m["block_size"], rms_norm_eps=m["norm_eps"],
                  rope_theta=m["rope_theta"], tie_word_embeddings=m["tie_weights"],
                  attention_dropout=m["dropout"], num_experts_per_tok=m["num_experts_per_tok"],
                  router_aux_loss_coef=m["router_aux_loss_coef"],
                  output_router_logits=m["output_router_logits"], hidden_act="silu",
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if m["name"] == "mixtral":
        base, config = MixtralForCausalLM, MixtralConfig(
            num_local_experts=m["num_experts"], sliding_window=m["sliding_window"] or None, **common)
    else:
        base, config = Qwen3MoeForCausalLM, Qwen3MoeConfig(
            num_experts=m["num_experts"], norm_topk_prob=m["norm_topk_prob"],
            moe_intermediate_size=m["moe_intermediate_size"] or m["intermediate_size"], **common)

    class MoeRef(base):
        def forward(self, ids):
            out = super().forward(input_ids=ids, use_cache=False, output_router_logits=True)
            self.last_aux = out.aux_loss
            return out.logits

        def weights(self):
            with tempfile.TemporaryDirectory() as d:
                self.save_pretrained(d)
                return load_file(os.path.join(d, "model.safetensors"))

        def load_weights(self, sd):
            with tempfile.TemporaryDirectory() as d:
                self.config.save_pretrained(d)
                save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(d, "model.safetensors"),
                          metadata={"format": "pt"})
                loaded = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
            missing, unexpected = self.load_state_dict(loaded.state_dict(), strict=False)
            if missing or unexpected:
                raise KeyError(f"weights do not match: missing {missing}, unexpected {unexpected}")

    model = MoeRef(config)
    model.config._attn_implementation = "sdpa"
    return model
