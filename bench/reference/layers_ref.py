"""model.name layers in PyTorch: the same nn.Sequential that ltrain builds from the same YAML
(src/ltrain/models/layer_graph.cpp), so that parameter names ("layers.3.weight",
"layers.4.0.weight" inside a residual) and initialisation match.

    model = nn.Sequential(*layer_modules(cfg["model"]["layers"], input_shape, classes, tokens))

Input sizes are inferred from the shapes, as ltrain does.
"""
import math

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    """nn.RMSNorm's computation in float32, as ltrain's (its parameter is "weight")."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class Chain(nn.Module):
    """Layers in a row registered "0", "1", ... and, for a residual, x + f(x) with "proj"."""

    def __init__(self, parts, residual, proj=None):
        super().__init__()
        for i, p in enumerate(parts):
            self.add_module(str(i), p)
        self.n, self.residual = len(parts), residual
        if proj is not None:
            self.proj = proj

    def forward(self, x):
        y = x
        for i in range(self.n):
            y = getattr(self, str(i))(y)
        if not self.residual:
            return y
        return (self.proj(x) if hasattr(self, "proj") else x) + y


def _spec(item):
    if isinstance(item, str):
        return item, {}, []
    (name, body), = item.items()
    if body is None:
        return name, {}, []
    if isinstance(body, list):
        return name, {}, body
    if isinstance(body, dict):
        args = {k: v for k, v in body.items() if k != "layers"}
        return name, args, body.get("layers", [])
    lone = {"linear": "out", "conv1d": "out", "conv2d": "out", "group_norm": "groups", "dropout": "p",
            "max_pool2d": "kernel", "avg_pool2d": "kernel", "adaptive_avg_pool2d": "out", "embedding": "dim"}
    return name, {lone[name]: body}, []


def _pair(v, n):
    return list(v) if isinstance(v, list) else [v] * n


def _build(items, shape, classes, top):
    mods = []
    for i, item in enumerate(items):
        name, a, children = _spec(item)
        last = top and i == len(items) - 1
        if name == "linear":
            out = classes if a["out"] == "classes" else a["out"]
            mods.append(nn.Linear(shape[-1], out, bias=a.get("bias", True)))
            shape = shape[:-1] + [out]
        elif name in ("conv1d", "conv2d"):
            k = 1 if name == "conv1d" else 2
            kernel, stride = _pair(a["kernel"], k), _pair(a.get("stride", 1), k)
            dil = _pair(a.get("dilation", 1), k)
            same = a.get("padding") == "same"
            pad = "same" if same else _pair(a.get("padding", 0), k)
            conv = nn.Conv1d if k == 1 else nn.Conv2d
            mods.append(conv(shape[0], a["out"], kernel if k == 2 else kernel[0],
                             stride=stride if k == 2 else stride[0],
                             padding=pad if same or k == 2 else pad[0],
                             dilation=dil if k == 2 else dil[0], groups=a.get("groups", 1),
                             bias=a.get("bias", True)))
            sizes = [shape[d + 1] if same else
                     (shape[d + 1] + 2 * pad[d] - dil[d] * (kernel[d] - 1) - 1) // stride[d] + 1
                     for d in range(k)]
            shape = [a["out"]] + sizes
        elif name in ("batch_norm1d", "batch_norm2d"):
            bn = nn.BatchNorm1d if name == "batch_norm1d" else nn.BatchNorm2d
            mods.append(bn(shape[0], eps=a.get("eps", 1e-5), momentum=a.get("momentum", 0.1)))
        elif name == "layer_norm":
            mods.append(nn.LayerNorm(shape[-1], eps=a.get("eps", 1e-5),
                                     elementwise_affine=a.get("elementwise_affine", True)))
        elif name == "rms_norm":
            mods.append(RMSNorm(shape[-1], a.get("eps", 1e-6)))
        elif name == "group_norm":
            mods.append(nn.GroupNorm(a["groups"], shape[0], eps=a.get("eps", 1e-5)))
        elif name == "dropout":
            mods.append(nn.Dropout(a.get("p", 0.5)))
        elif name in ("relu", "silu", "tanh", "sigmoid"):
            mods.append({"relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[name]())
        elif name == "gelu":
            mods.append(nn.GELU(approximate=a.get("approximate", "none")))
        elif name == "softmax":
            mods.append(nn.Identity() if last else nn.Softmax(a.get("dim", -1)))
        elif name in ("max_pool2d", "avg_pool2d"):
            kernel = _pair(a["kernel"], 2)
            stride = _pair(a["stride"], 2) if "stride" in a else kernel
            pad = _pair(a.get("padding", 0), 2)
            pool = nn.MaxPool2d if name == "max_pool2d" else nn.AvgPool2d
            mods.append(pool(kernel, stride=stride, padding=pad))
            shape = [shape[0]] + [(shape[d + 1] + 2 * pad[d] - kernel[d]) // stride[d] + 1 for d in range(2)]
        elif name == "adaptive_avg_pool2d":
            out = _pair(a.get("out", 1), 2)
            mods.append(nn.AdaptiveAvgPool2d(out))
            shape = [shape[0]] + out
        elif name == "flatten":
            mods.append(nn.Flatten())
            shape = [math.prod(shape)]
        elif name == "embedding":
            mods.append(nn.Embedding(a.get("num", classes), a["dim"]))
            shape = shape + [a["dim"]]
        elif name in ("residual", "sequential"):
            parts, inner = _build(children, list(shape), classes, False)
            proj = None
            if name == "residual" and inner != shape:
                if len(shape) == 3:
                    proj = nn.Conv2d(shape[0], inner[0], 1, stride=shape[1] // inner[1], bias=False)
                else:
                    proj = nn.Linear(shape[-1], inner[-1], bias=False)
            mods.append(Chain(parts, name == "residual", proj))
            shape = inner
        else:
            raise ValueError(f"unknown layer {name!r}")
    return mods, shape


def layer_modules(layers, input_shape, classes):
    mods, _ = _build(layers, list(input_shape), classes, True)
    return mods
