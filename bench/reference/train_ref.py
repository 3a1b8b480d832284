"""The Python reference for ltrain: the same config, model, data, data order, optimizer, schedule
and loop, with torch.nn.parallel.DistributedDataParallel under torchrun (Gloo on CPU, NCCL on GPU).

  torchrun --nproc-per-node 2 bench/reference/train_ref.py CONFIG.yaml [KEY=VALUE ...] \\
      --ltrain build/ltrain --out DIR [--init W.safetensors] [--save-init W.safetensors]

The config is resolved by `ltrain config`, so defaults and overrides mean exactly what they mean to
ltrain. Rank 0 writes DIR/metrics.jsonl (one train record per log_every steps, loss averaged over
ranks, as ltrain's), DIR/summary.json and DIR/model.safetensors (final weights).
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import resource
import struct
import sys
import subprocess
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import yaml
from safetensors.torch import load_file, save_file
from torch.utils.data import DistributedSampler

from gpt_ref import gpt_layers
from layers_ref import layer_modules

FASHION_MNIST = os.environ.get("LTRAIN_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.from_numpy(np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims).copy())


def idx_file(directory, stem):
    for ext in (".gz", ""):
        if os.path.exists(os.path.join(directory, stem + ext)):
            return os.path.join(directory, stem + ext)
    raise FileNotFoundError(os.path.join(directory, stem + ".gz"))


class Split:
    def __init__(self, inputs, targets, mean=0.0, std=1.0):
        self.inputs, self.targets, self.mean, self.std = inputs, targets, mean, std

    def batch(self, idx):
        """As ltrain's loader: gather, then (x/255 - mean)/std as one multiply-add in float32, in one
        pass from the bytes (the same ATen kernel, so the same floats)."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        x = self.inputs.index_select(0, idx)
        if x.dtype == torch.uint8:
            scale = np.float32(1.0) / (np.float32(255.0) * np.float32(self.std))
            shift = -np.float32(self.mean) / np.float32(self.std)
            x = torch.add(torch.tensor(float(shift), dtype=torch.float32), x, alpha=float(scale))
        return x, self.targets.index_select(0, idx)


def block_offset(seed, epoch, block_size):
    """ltrain's per-epoch cut of a token corpus (src/ltrain/data/text.cpp): splitmix64."""
    m = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + epoch + 1) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return z % block_size


class TokenSplit:
    """llm.c or nanoGPT shards, memory-mapped, cut into blocks as ltrain's TokenBlocks cuts them."""

    def __init__(self, files, block_size):
        self.t, self.offset, self.shards, self.spans = block_size, 0, [], []
        first = 0
        for f in files:
            raw = np.memmap(f, dtype=np.uint8, mode="r")
            head = np.frombuffer(raw[:1024].tobytes(), dtype=np.int32) if len(raw) >= 1024 else None
            if head is not None and head[0] in (20240520, 20240801):
                tokens = np.memmap(f, dtype=np.uint16 if head[0] == 20240520 else np.uint32, mode="r",
                                   offset=1024, shape=(int(head[2]),))
            else:
                tokens = np.memmap(f, dtype=np.uint16, mode="r")
            n, shifts = (len(tokens) - block_size) // block_size, True
            if n < 1:
                n, shifts = max(0, (len(tokens) - 1) // block_size), False
            self.shards.append(tokens)
            self.spans.append((first, n, shifts))
            first += n
        self.n = first
        self.targets = range(self.n)  # len() is the number of examples, as for the other splits

    def batch(self, idx):
        rows = []
        for i in idx:
            k = max(j for j, s in enumerate(self.spans) if s[0] <= i)
            first, _, shifts = self.spans[k]
            start = (self.offset if shifts else 0) + (i - first) * self.t
            rows.append(torch.from_numpy(self.shards[k][start:start + self.t + 1].astype(np.int64)))
        b = torch.stack(rows)
        return b[:, :-1].contiguous(), b[:, 1:].contiguous()


class ChatSplit:
    """scripts/prepare_chat.py's examples, each one block: labels as Hugging Face makes them (the
    tokens, -100 where the mask does not learn them), shifted by one as its causal-LM loss does."""

    def __init__(self, path, block_size):
        from safetensors.torch import load_file
        f = load_file(path)
        self.tokens, self.mask, self.offsets, self.t = f["tokens"].long(), f["mask"].bool(), f["offsets"], block_size
        self.targets = range(len(self.offsets) - 1)

    def batch(self, idx):
        xs, ys = [], []
        for i in idx:
            a, b = self.offsets[i].item(), self.offsets[i + 1].item()
            ids = self.tokens[a:b][:self.t + 1]
            labels = torch.where(self.mask[a:b][:self.t + 1], ids, torch.tensor(-100))
            pad = self.t + 1 - len(ids)
            xs.append(F.pad(ids, (0, pad), value=0)[:self.t])
            ys.append(F.pad(labels, (0, pad), value=-100)[1:])
        return torch.stack(xs), torch.stack(ys)


def load_data(cfg, seed):
    d = cfg["data"]
    if d["dataset"] == "chat":
        return tuple(ChatSplit(os.path.join(d["path"], f), cfg["model"]["block_size"])
                     for f in ("train.safetensors", "val.safetensors"))
    if d["dataset"] == "tokens":
        import glob
        files = [sorted(glob.glob(os.path.join(d["path"], p))) for p in (d["train_files"], d["val_files"])]
        return TokenSplit(files[0], cfg["model"]["block_size"]), TokenSplit(files[1], cfg["model"]["block_size"])
    if d["dataset"] not in ("synthetic", "fashion_mnist", "mnist"):
        raise NotImplementedError(f"the reference reads IDX and synthetic data, not {d['dataset']!r}")
    if d["dataset"] == "synthetic":
        g = torch.Generator()
        g.manual_seed(seed)
        shape, k = d["synthetic_shape"], d["synthetic_classes"]
        n_train, n_test = d["synthetic_train_samples"], d["synthetic_test_samples"]
        protos = torch.randn(k, *shape, generator=g)
        targets = torch.randint(k, (n_train + n_test,), generator=g)
        inputs = protos.index_select(0, targets) + 1.5 * torch.randn(n_train + n_test, *shape, generator=g)
        return (Split(inputs[:n_train].clone(), targets[:n_train].clone()),
                Split(inputs[n_train:].clone(), targets[n_train:].clone()))
    directory = d["path"] or FASHION_MNIST
    mean, std = (0.2860, 0.3530) if d["dataset"] == "fashion_mnist" else (0.1307, 0.3081)
    out = []
    for prefix in ("train", "t10k"):
        images = read_idx(idx_file(directory, prefix + "-images-idx3-ubyte"))
        labels = read_idx(idx_file(directory, prefix + "-labels-idx1-ubyte")).long()
        out.append(Split(images.unsqueeze(1).contiguous(), labels, mean, std))
    return out[0], out[1]


class BasicBlock(nn.Module):
    """ResNet's basic block as ltrain builds it (src/ltrain/models/resnet.cpp)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


def resnet_layers(m, shape, classes):
    blocks = [2, 2, 2, 2] if m["depth"] == 18 else [3, 4, 6, 3]
    w = m["width"]
    layers = [nn.Conv2d(shape[0], w, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
    cin = w
    for stage, n in enumerate(blocks):
        for b in range(n):
            layers.append(BasicBlock(cin, w << stage, 2 if stage > 0 and b == 0 else 1))
            cin = w << stage
    return layers + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]


class Model(nn.Module):
    """ltrain's models, layer for layer, so parameter names ("layers.1.weight") match."""

    def __init__(self, m, shape, classes):
        super().__init__()
        act = ACTIVATIONS[m["activation"]]
        layers = []
        if m["name"] == "resnet":
            self.layers = nn.Sequential(*resnet_layers(m, shape, classes))
            return
        if m["name"] == "gpt":
            self.layers = nn.Sequential(*gpt_layers(m, classes))
            return
        if m["name"] == "layers":
            self.layers = nn.Sequential(*layer_modules(m["layers"], shape, classes))
            return
        if m["name"] == "mlp":
            layers.append(nn.Flatten())
            width = math.prod(shape)
            for h in m["hidden"]:
                layers += [nn.Linear(width, h), act()] + ([nn.Dropout(m["dropout"])] if m["dropout"] > 0 else [])
                width = h
        else:
            c, h, w = shape
            for out in m["channels"]:
                k = m["kernel_size"]
                layers.append(nn.Conv2d(c, out, k, padding=k // 2, bias=not m["batch_norm"]))
                if m["batch_norm"]:
                    layers.append(nn.BatchNorm2d(out))
                layers.append(act())
                if m["pool"] != "none":
                    layers.append(nn.MaxPool2d(2) if m["pool"] == "max" else nn.AvgPool2d(2))
                    h, w = h // 2, w // 2
                c = out
            layers.append(nn.Flatten())
            width = c * h * w
            for f in m["fc"]:
                layers += [nn.Linear(width, f), act()] + ([nn.Dropout(m["dropout"])] if m["dropout"] > 0 else [])
                width = f
        layers.append(nn.Linear(width, classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def learning_rate(opt, s, step, total):
    """ltrain's schedule (src/ltrain/train/schedule.cpp)."""
    peak = opt["lr"]
    if step < s["warmup_steps"]:
        return peak * (step + 1) / s["warmup_steps"]
    after = step - s["warmup_steps"]
    span = max(1, total - s["warmup_steps"] - 1)
    t = min(1.0, after / span)
    if s["name"] == "step":
        return peak * s["gamma"] ** (after // s["step_size"])
    if s["name"] == "cosine":
        return s["min_lr"] + (peak - s["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * t))
    if s["name"] == "linear":
        return peak + (s["min_lr"] - peak) * t
    if s["name"] == "wsd":
        decay = max(1, round(s["decay_fraction"] * total))
        start = total - decay
        return peak if step < start else peak + (s["min_lr"] - peak) * (step - start + 1) / decay
    return peak


def make_optimizer(o, params):
    o = dict(o, lr=float(o["lr"]), eps=float(o["eps"]), weight_decay=float(o["weight_decay"]),
             momentum=float(o["momentum"]), betas=[float(b) for b in o["betas"]])
    params = list(params)
    if o["decay"] == "matrices" and o["weight_decay"] > 0:
        # nanoGPT's parameter groups: matrices (and embeddings) decay, biases and norms do not.
        params = [{"params": [p for p in params if p.dim() >= 2]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        params = [g for g in params if g["params"]]
    if o["name"] == "adam":
        return torch.optim.Adam(params, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])
    if o["name"] == "adamw":
        return torch.optim.AdamW(params, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])
    return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"],
                           weight_decay=o["weight_decay"])


def evaluate(model, split, batch_size, rank, world, device):
    """As ltrain: each rank a contiguous shard of the test set, sums reduced over ranks."""
    model.eval()
    n = len(split.targets)
    begin, end = n * rank // world, n * (rank + 1) // world
    sums = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for s in range(begin, end, batch_size):
            x, y = split.batch(list(range(s, min(s + batch_size, end))))
            out = model(x.to(device)).float()
            sums[0] += loss_of(out, y.to(device), reduction="sum").item()
            sums[1] += (out.argmax(-1) == y.to(device)).sum().item()
            sums[2] += (y >= 0).sum().item()  # examples, tokens, or the tokens a mask learns
    if world > 1:
        dist.all_reduce(sums)
    model.train()
    n = max(sums[2].item(), 1.0)
    return sums[0].item() / n, sums[1].item() / n


def loss_of(out, y, reduction="mean"):
    """Cross entropy per example, or per token for [B, T, V] logits (ltrain's train/loss.cpp)."""
    if out.dim() == 3:
        return F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction=reduction)
    return F.cross_entropy(out, y, reduction=reduction)


def lora(cfg, model):
    """finetune.method lora: PEFT's LoRA injected into `model` (which then runs with the adapters,
    only they trainable); returns a function giving the adapters' state as PEFT saves it."""
    f, c = cfg.get("finetune", {}), cfg.get("lora", {})
    if f.get("method") != "lora":
        return None
    import peft
    if f["adapter_from"]:
        wrapped = peft.PeftModel.from_pretrained(model, f["adapter_from"], is_trainable=True)
    else:
        targets = c["target_modules"]
        wrapped = peft.get_peft_model(model, peft.LoraConfig(
            r=c["rank"], lora_alpha=c["alpha"], lora_dropout=c["dropout"], use_dora=c["use_dora"],
            target_modules=targets if targets == "all-linear" else targets.split(",")))
    return lambda: peft.get_peft_model_state_dict(wrapped)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--ltrain", default="build/ltrain")
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", help="initial weights (.safetensors)")
    ap.add_argument("--save-init", help="write the seeded initial weights here and exit")
    ap.add_argument("--fsdp", action="store_true",
                    help="with several processes: torch.distributed.fsdp.fully_shard (FSDP2) over "
                         "each layer with parameters of its own, then the whole, instead of DDP")
    ap.add_argument("--flops", action="store_true",
                    help="print the training FLOPs per example (forward and backward, counted by "
                         "torch.utils.flop_counter on one batch) as JSON and exit")
    args = ap.parse_args()
    start = time.time()
    cfg = yaml.safe_load(subprocess.check_output([args.ltrain, "config", args.config, *args.overrides]))
    if cfg["train"]["threads"] > 0:
        torch.set_num_threads(cfg["train"]["threads"])

    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    train, test = load_data(cfg, cfg["seed"])
    torch.manual_seed(cfg["seed"])
    classes = 10 if cfg["data"]["dataset"] != "synthetic" else cfg["data"]["synthetic_classes"]
    if cfg["data"]["dataset"] in ("tokens", "chat"):
        classes = cfg["model"]["vocab_size"]
    if cfg["model"]["name"] == "llama":
        from llama_ref import llama_model
        model = llama_model(cfg["model"], classes)
    elif cfg["model"]["name"] in ("mixtral", "qwen3_moe"):
        from llama_ref import transformers_moe
        model = transformers_moe(cfg["model"], classes)
    elif cfg["model"]["name"] == "torchscript":
        # The module itself, its weights as saved: ltrain starts from the same file.
        model = torch.jit.load(cfg["model"]["path"])
    else:
        shape = [cfg["model"]["block_size"]] if isinstance(train, TokenSplit) else list(train.inputs.shape[1:])
        model = Model(cfg["model"], shape, classes)
    weights = model.weights if hasattr(model, "weights") else model.state_dict
    if args.save_init:
        save_file({k: v.contiguous() for k, v in weights().items()}, args.save_init)
        return
    if args.flops:
        from torch.utils.flop_counter import FlopCounterMode
        n = cfg["data"]["batch_size"]
        x, y = train.batch(list(range(n)))
        with FlopCounterMode(display=False) as counter:
            loss_of(model(x).float(), y).backward()
        print(json.dumps({"flops_per_example": counter.get_total_flops() / n}))
        return
    if args.init:
        (model.load_weights if hasattr(model, "load_weights") else model.load_state_dict)(load_file(args.init))
    adapters = lora(cfg, model)
    print(f"trainable {sum(p.numel() for p in model.parameters() if p.requires_grad)}", file=sys.stderr)
    model.to(device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if world > 1 and args.fsdp:
        # ltrain's dist.zero 3 oracle. A tied embedding stays with the root, where the head that
        # multiplies by it finds it gathered; no_sync and per-rank evaluation do not apply.
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        if cfg["train"]["grad_accum"] != 1:
            sys.exit("train_ref.py --fsdp: train.grad_accum must be 1")
        # ltrain under bf16: each unit gathered in bf16, its gradients reduced in dist.reduce_dtype.
        mp = MixedPrecisionPolicy()
        if cfg["train"]["precision"] == "bf16":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                      reduce_dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[
                                          cfg["dist"]["reduce_dtype"]])
        tied = cfg["model"]["name"] == "gpt" and cfg["model"]["tie_weights"]
        for i, layer in enumerate(model.layers):
            if any(True for _ in layer.parameters(recurse=True)) and not (tied and i == 0):
                fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    elif world > 1:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cfg["dist"]["bucket_cap_mb"],
                                                    find_unused_parameters=cfg["dist"]["find_unused_parameters"])
    opt = make_optimizer(cfg["optimizer"], model.parameters())
    core, m, w_aux = model.module if world > 1 and not args.fsdp else model, cfg["model"], 0.0
    # ltrain's train.precision: autocast to bf16/fp16, fp16 with torch's own GradScaler.
    precision = cfg["train"]["precision"]
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    d, t = cfg["data"], cfg["train"]
    sampler = DistributedSampler(range(len(train.targets)), num_replicas=world, rank=rank, shuffle=d["shuffle"],
                                 seed=cfg["seed"], drop_last=False)
    n = len(sampler)
    batches = n // d["batch_size"] if d["drop_last"] else -(-n // d["batch_size"])
    # train.max_steps, when set, is the run's length, the epochs repeating as needed (as ltrain,
    # Hugging Face's Trainer and torchtitan count it); else train.epochs.
    per_epoch = -(-batches // t["grad_accum"])
    epochs = -(-t["max_steps"] // per_epoch) if t["max_steps"] > 0 else t["epochs"]
    total = t["max_steps"] if t["max_steps"] > 0 else epochs * per_epoch
    os.makedirs(args.out, exist_ok=True)
    metrics = open(os.path.join(args.out, "metrics.jsonl"), "w") if rank == 0 else None
    step, window, window_n, samples, t_train = 0, 0.0, 0, 0, 0.0
    first_step_wall_time, w_start, w_samples, w_wait = 0.0, time.time(), 0, 0.0
    for epoch in range(epochs):
        if step >= total:
            break
        sampler.set_epoch(epoch)
        if isinstance(train, TokenSplit):
            train.offset = block_offset(cfg["seed"], epoch, train.t)
        idx = list(sampler)
        b = 0
        t0 = time.time()
        while step < total and b < batches:
            k = min(t["grad_accum"], batches - b)
            for g in opt.param_groups:
                g["lr"] = learning_rate(cfg["optimizer"], cfg["scheduler"], step, total)
            opt.zero_grad()
            step_loss = 0.0
            for i in range(k):
                t_wait = time.time()
                x, y = train.batch(idx[(b + i) * d["batch_size"]:(b + i + 1) * d["batch_size"]])
                w_wait += time.time() - t_wait
                if device.type == "cuda":  # as a careful user feeds a GPU: pinned, copied async
                    x, y = x.pin_memory(), y.pin_memory()
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                sync = i == k - 1
                ctx = model.no_sync() if (world > 1 and not sync) else contextlib.nullcontext()
                with ctx:
                    with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                        loss = loss_of(model(x).float(), y)
                        aux = getattr(core, "last_aux", None)  # mixtral, qwen3_moe: the routers'
                        if aux is not None:
                            w_aux += aux.detach().double() / k
                            if m["output_router_logits"]:
                                loss = loss + m["router_aux_loss_coef"] * aux
                    scaler.scale(loss / k).backward()
                # Kept on the device and read once per logging window, not once per micro-step
                # (a host sync that would stall a GPU's queue). Summed in float64 as a Python
                # float would be.
                step_loss = step_loss + loss.detach().double() / k
                samples += len(y) * world
                w_samples += len(y) * world
            scaler.unscale_(opt)
            if t["clip_grad_norm"] > 0:
                nn.utils.clip_grad_norm_(model.parameters(), t["clip_grad_norm"])
            scaler.step(opt)
            scaler.update()
            step += 1
            if not first_step_wall_time:
                first_step_wall_time = time.time()
            b += k
            window += step_loss
            window_n += 1
            if step % t["log_every"] == 0 or step == total:
                mean = torch.as_tensor(window / window_n, dtype=torch.float64, device=device).reshape(1)
                if world > 1:
                    dist.all_reduce(mean)
                    mean /= world
                secs = time.time() - w_start
                record = {"step": step, "epoch": epoch, "split": "train", "loss": mean.item(),
                          "samples_per_s": w_samples / secs, "data_wait_share": w_wait / secs,
                          "wall_time": time.time()}
                if torch.is_tensor(w_aux):  # the routers' loss, as ltrain reports it
                    aux_mean = (w_aux / window_n).to(device).reshape(1)
                    if world > 1:
                        dist.all_reduce(aux_mean)
                        aux_mean /= world
                    record["aux_loss"] = aux_mean.item()
                    w_aux = 0.0
                if metrics:
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                window, window_n = 0.0, 0
                w_start, w_samples, w_wait = time.time(), 0, 0.0
        t_train += time.time() - t0
    if args.fsdp and world > 1:  # each rank's own shard of the test set would break lockstep
        test_loss, test_acc = float("nan"), float("nan")
    else:
        # The module itself: DDP's forward broadcasts buffers, a collective that a rank with no
        # test examples (a tiny validation split) would never join.
        net = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        test_loss, test_acc = evaluate(net, test, d["eval_batch_size"], rank, world, device)
    if args.fsdp and world > 1:  # gathered on every rank (a collective), written by rank 0
        fsdp_weights = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                        for k, v in model.state_dict().items()}
    rss = torch.zeros(world, dtype=torch.float64)
    rss[rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    if world > 1:
        dist.all_reduce(rss)
    if rank == 0:
        net = model.module if world > 1 and not args.fsdp else model
        net_weights = net.weights() if hasattr(net, "weights") else net.state_dict()
        if adapters:  # the adapters alone, under the names PEFT saves them by
            net_weights = adapters()
        if args.fsdp and world > 1:
            net_weights = fsdp_weights
        save_file({k: v.detach().cpu().contiguous() for k, v in net_weights.items()},
                  os.path.join(args.out, "model.safetensors"))
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump({"status": "completed", "steps": step, "wall_s": time.time() - start,
                       "samples_per_s": samples / t_train if t_train else 0, "world_size": world,
                       "first_step_wall_time": first_step_wall_time, "peak_rss_mb": rss.max().item(),
                       "optimizer_state_mb": sum(t.numel() * t.element_size() for st in opt.state.values()
                                                 for t in st.values() if torch.is_tensor(t) and t.dim() > 0) / 2**20,
                       "gradient_mb": sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()
                                          if p.grad is not None) / 2**20,
                       "test_loss": test_loss, "test_accuracy": test_acc}, f)
    if world > 1:
        dist.barrier()  # every rank's output is written
    # Exit here, before the DDP model is freed and before interpreter finalisation: freeing its
    # Reducer holds the GIL while joining Gloo's work threads, which may need the GIL to free a
    # tensor (a deadlock seen once in 50 runs); and with Gloo, torch can abort at finalisation
    # (SIGABRT, "terminate called without an active exception"; pytorch/pytorch#179291).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
