"""ltrain's GPT (src/ltrain/models/gpt.cpp) in PyTorch, module for module, so that parameter names
("layers.0.wte.weight", "layers.1.attn.c_attn.weight", ...) and logits match: nanoGPT's block
inside ltrain's "layers" Sequential of embedding, blocks, final LayerNorm and head."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    def __init__(self, vocab, block_size, n_embd, dropout):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_drop = nn.Dropout(dropout)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for y in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.resid_drop(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class Mlp(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = Mlp(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class LmHead(nn.Module):
    """Tied: multiplies by the embedding's matrix without registering it (saved once, as ltrain)."""

    def __init__(self, n_embd, vocab, tied=None):
        super().__init__()
        self._tied = [tied]  # a list, so that nn.Module does not register it
        self.weight = None if tied is not None else nn.Parameter(torch.empty(vocab, n_embd))

    def forward(self, x):
        return F.linear(x, self._tied[0].wte.weight if self._tied[0] is not None else self.weight)


def gpt_layers(m, vocab):
    emb = Embedding(vocab, m["block_size"], m["n_embd"], m["dropout"])
    layers = [emb] + [Block(m["n_embd"], m["n_head"], m["dropout"]) for _ in range(m["n_layer"])]
    layers += [nn.LayerNorm(m["n_embd"]), LmHead(m["n_embd"], vocab, emb if m["tie_weights"] else None)]
    # GPT-2's initialisation, as ltrain's.
    for name, p in nn.Sequential(*layers).named_parameters():
        if ".ln_" in name or name.startswith(f"{m['n_layer'] + 1}."):
            continue
        if name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * m["n_layer"]) if "c_proj.weight" in name else 0.02)
    return layers


def gpt_flops_per_token(n_params, m):
    """Training FLOPs per token (PaLM appendix B, as nanoGPT's estimate_mfu): 6N + 12 L T C."""
    return 6 * n_params + 12 * m["n_layer"] * m["block_size"] * m["n_embd"]
