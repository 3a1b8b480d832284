"""The language-model benchmark of scripts/gpu_check.sh: GPT-2 124M (configs/gpt2_124m.yaml) and a
llama of similar size at bf16 on one GPU, ltrain against Python torch eager on the same model
(bench/reference/gpt_ref.py's GPT, llama_ref.py's EagerLlama: the same layers and names), and for
the same work on both sides.

  python bench/gpt_bench.py --ltrain build-gpu/ltrain --out DIR [--steps 40] [--model gpt,llama]

Both sides do the same work: random tokens of GPT-2's padded vocabulary (50304) in an llm.c
shard, batch 16 x 1024 tokens, one micro-batch a step, AdamW (lr 6e-4 constant, betas 0.9/0.95,
decay 0.1 on matrices), gradients clipped to norm 1.0, bf16 autocast, fp32 weights and loss; the
Python side as a careful user writes it (fused AdamW, pinned batches copied non_blocking, no host
read inside the window). tokens/s is the mean over the logging windows after the first (warm-up);
MFU = tokens/s x training FLOPs per token (6N + 12 L H Q T, nanoGPT's estimate, N without tables
only looked up) over the measured dense bf16 ceiling (--peak-tflops, bench/bf16_ceiling.py) and
over the datasheet's (--datasheet-tflops, 989 for an H100/H200 SXM). Prints a markdown table. --tiny runs small models (on the CPU where
there is no GPU) so that the script itself is tested without a GPU
(tests/integration/plot_test.cpp).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import yaml
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from gpt_ref import gpt_layers  # noqa: E402
from llama_ref import EagerLlama  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 50304
GPT = {"name": "gpt", "n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "dropout": 0.0,
       "tie_weights": True, "gelu": "tanh"}
LLAMA = {"name": "llama", "n_layer": 12, "n_head": 12, "n_kv_head": 4, "n_embd": 768,
         "intermediate_size": 2048, "block_size": 1024, "dropout": 0.0, "tie_weights": True,
         "norm_eps": 1e-5, "rope_theta": 10000.0}
BATCH = 16
LR, CLIP = 6e-4, 1.0  # both sides: constant lr, clipping, one micro-batch a step


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def flops_per_token(m, n_params):
    """6N + 12 L H Q T, N without the positions table (ltrain's train/mfu.cpp)."""
    n = n_params - (m["block_size"] * m["n_embd"] if m["name"] == "gpt" else 0)
    return 6 * n + 12 * m["n_layer"] * m["n_embd"] * m["block_size"]


def python_model(m):
    if m["name"] == "gpt":
        return nn.Sequential(*gpt_layers(m, VOCAB))
    return EagerLlama(m, VOCAB)


def python_eager(m, tokens, steps, log_every):
    torch.manual_seed(0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = python_model(m).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                            betas=(0.9, 0.95), weight_decay=0.1, fused=dev.type == "cuda")
    data = torch.from_numpy(tokens.astype(np.int64))
    t = m["block_size"]
    g = torch.Generator().manual_seed(0)
    windows, w_start = [], None
    for step in range(1, steps + 1):
        if w_start is None:
            sync()
            w_start = time.time()
        starts = torch.randint(len(data) - t - 1, (BATCH,), generator=g)
        x = torch.stack([data[s:s + t] for s in starts]).pin_memory().to(dev, non_blocking=True) \
            if dev.type == "cuda" else torch.stack([data[s:s + t] for s in starts])
        y = torch.stack([data[s + 1:s + t + 1] for s in starts]).to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0:
            sync()
            windows.append(BATCH * t * log_every / (time.time() - w_start))
            w_start = None
    mem = f"{torch.cuda.max_memory_allocated() / 2**20:.0f}" if dev.type == "cuda" else "-"
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    del model, opt
    return n_params, windows, mem


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ltrain_config(m, out):
    """configs/gpt2_124m.yaml with its model section replaced by `m` (training settings shared)."""
    with open(os.path.join(ROOT, "configs", "gpt2_124m.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["model"] = {**m, "vocab_size": VOCAB}
    path = os.path.join(out, f"{m['name']}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def ltrain_run(binary, m, data_dir, out, steps, log_every):
    run_dir = os.path.join(out, f"ltrain-{m['name']}")
    # gpt2_124m.yaml's accumulation and warm-up are a training recipe, not the benchmark's work:
    # the same single micro-batch, constant lr and clipping as the Python side.
    cmd = [binary, "train", ltrain_config(m, out), f"data.path={data_dir}",
           f"data.batch_size={BATCH}", "data.eval_batch_size=16", "train.grad_accum=1",
           f"optimizer.lr={LR}", "scheduler.name=constant", f"train.clip_grad_norm={CLIP}",
           f"train.max_steps={steps}", f"train.log_every={log_every}", "train.eval_every=100000",
           "train.checkpoint_every=100000", "data.num_workers=2",
           "--output-dir", run_dir]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ltrain failed ({r.returncode}): {r.stderr[-2000:]}")
    windows, mfu = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("split") == "train":
                windows.append(rec["tokens_per_s"])
                if "mfu" in rec:
                    mfu.append(rec["mfu"])
    with open(os.path.join(run_dir, "summary.json")) as f:
        mem = json.load(f).get("peak_cuda_memory_mb")
    return windows, f"{mem:.0f}" if mem else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ltrain", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the measured dense bf16 ceiling (bench/bf16_ceiling.py); 0: not shown")
    ap.add_argument("--datasheet-tflops", type=float, default=989.0,
                    help="the datasheet's dense bf16 peak (989: H100/H200 SXM)")
    ap.add_argument("--model", default="gpt,llama", help="comma-separated: gpt, llama")
    ap.add_argument("--tiny", action="store_true", help="small models: tests the script itself")
    args = ap.parse_args()
    global BATCH, VOCAB
    if args.tiny:
        for m in (GPT, LLAMA):
            m.update(n_layer=2, n_head=2, n_embd=32, block_size=32)
        LLAMA.update(n_kv_head=1, intermediate_size=64)
        BATCH, VOCAB = 4, 512
    os.makedirs(args.out, exist_ok=True)
    data_dir = os.path.join(args.out, "data")
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (4 << 20) if not args.tiny else (64 << 10))
    write_shard(os.path.join(data_dir, "train_000000.bin"), tokens)
    write_shard(os.path.join(data_dir, "val_000000.bin"), tokens[:1 << 16])

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    print(f"bf16 autocast, AdamW, batch {BATCH} x {GPT['block_size']} tokens, vocabulary {VOCAB}; "
          f"{device}, torch {torch.__version__}\n")
    print(f"MFU over the measured bf16 ceiling ({args.peak_tflops:.1f} TFLOP/s) / over the "
          f"datasheet's ({args.datasheet_tflops:.0f} TFLOP/s).\n")
    print("| model | implementation | tokens/s | MFU (measured / datasheet) | peak CUDA memory MiB |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.model.split(","):
        m = GPT if name == "gpt" else LLAMA
        n_params, py_windows, py_mem = python_eager(m, tokens, args.steps, args.log_every)
        flops = flops_per_token(m, n_params)
        label = f"{name} {m['n_layer']}x{m['n_embd']}, {n_params / 1e6:.1f}M"
        windows, mem = ltrain_run(args.ltrain, m, data_dir, args.out, args.steps, args.log_every)
        rows = [("Python torch eager", py_windows, py_mem), ("ltrain", windows, mem)]
        base = None
        for impl, windows, mem in rows:
            tps = sum(windows[1:]) / max(1, len(windows) - 1)
            base = base or tps
            mfu = [f"{100 * tps * flops / (p * 1e12):.1f}%" if p > 0 else "-"
                   for p in (args.peak_tflops, args.datasheet_tflops)]
            print(f"| {label} | {impl} | {tps:,.0f} ({tps / base:.2f}x) | {mfu[0]} / {mfu[1]} | {mem} |")


if __name__ == "__main__":
    main()
