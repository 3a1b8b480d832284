"""The GPT benchmark of scripts/gpu_check.sh: a >= 100M-parameter GPT at bf16 on one GPU, ltrain
against Python torch eager on the same model (bench/reference/gpt_ref.py, the same layers and
initialisation), and ltrain's dist.strategy dp against ddp.

  python bench/gpt_bench.py --ltrain build-gpu/ltrain --out DIR [--steps 40]

Both sides: byte-level tokens (vocabulary 256) of the same random text, batch 16 x 1024 tokens,
AdamW, bf16 autocast, fp32 weights and loss. tokens/s is the mean over the logging windows after
the first (warm-up); model FLOP utilisation = tokens/s x training FLOPs per token (6N + 12 L T C,
nanoGPT's estimate) / the GPU's dense bf16 peak (--peak-tflops, 989 for an H100/H200 SXM).
Prints a markdown table. --tiny runs a small model (on the CPU where there is no GPU) so that the
script itself is tested without a GPU (tests/integration/bench_scripts_test.cpp).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from gpt_ref import gpt_flops_per_token, gpt_layers  # noqa: E402

MODEL = {"n_layer": 16, "n_head": 12, "n_embd": 768, "block_size": 1024, "dropout": 0.0,
         "tie_weights": True}
BATCH = 16


def python_eager(text, steps, log_every):
    torch.manual_seed(0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(*gpt_layers(MODEL, 256)).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    t = MODEL["block_size"]
    g = torch.Generator().manual_seed(0)
    windows, w_start = [], None
    for step in range(1, steps + 1):
        if w_start is None:
            sync()
            w_start = time.time()
        starts = torch.randint(len(data) - t - 1, (BATCH,), generator=g)
        x = torch.stack([data[s:s + t] for s in starts]).to(dev, non_blocking=True)
        y = torch.stack([data[s + 1:s + t + 1] for s in starts]).to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, 256), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0:
            sync()
            windows.append(BATCH * t * log_every / (time.time() - w_start))
            w_start = None
    mem = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else float("nan")
    return n_params, windows, mem


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ltrain_run(binary, text_path, out, steps, log_every, strategy):
    cfg = os.path.join(out, "gpt_bench.yaml")
    with open(cfg, "w") as f:
        f.write("seed: 0\n")
    overrides = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in MODEL.items()]
    run_dir = os.path.join(out, f"ltrain-{strategy}")
    cmd = [binary, "train", cfg, "data.dataset=text", f"data.path={text_path}", "data.tokenizer=byte",
           "data.val_fraction=0.01", f"data.batch_size={BATCH}", "data.eval_batch_size=16",
           "model.name=gpt", *overrides, "optimizer.name=adamw", "optimizer.lr=3e-4",
           "optimizer.betas=[0.9,0.95]", "optimizer.weight_decay=0.1", "train.precision=bf16",
           f"train.max_steps={steps}", f"train.log_every={log_every}", "train.eval_every=100000",
           "train.checkpoint_every=100000", f"dist.strategy={strategy}", "data.num_workers=2",
           "--output-dir", run_dir, "--overwrite"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ltrain failed ({r.returncode}): {r.stderr[-2000:]}")
    windows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("split") == "train":
                windows.append(rec["tokens_per_s"])
    return windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ltrain", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--tiny", action="store_true", help="a small model: tests the script itself")
    args = ap.parse_args()
    global BATCH
    if args.tiny:
        MODEL.update(n_layer=2, n_head=2, n_embd=32, block_size=32)
        BATCH = 4
    os.makedirs(args.out, exist_ok=True)
    text_path = os.path.join(args.out, "bytes.txt")
    text = os.urandom((8 << 20) if not args.tiny else (64 << 10))
    with open(text_path, "wb") as f:
        f.write(text)

    n_params, py_windows, py_mem = python_eager(text, args.steps, args.log_every)
    flops = gpt_flops_per_token(n_params, MODEL)
    rows = [("Python torch eager", py_windows, f"{py_mem:.0f}")]
    for strategy in ("ddp", "dp"):
        rows.append((f"ltrain (dist.strategy {strategy})",
                     ltrain_run(args.ltrain, text_path, args.out, args.steps, args.log_every, strategy), "-"))
    print(f"GPT {MODEL['n_layer']}x{MODEL['n_embd']}, {n_params / 1e6:.1f}M parameters, block "
          f"{MODEL['block_size']}, batch {BATCH}, bf16 autocast, AdamW; "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}, "
          f"torch {torch.__version__}\n")
    print("| implementation | tokens/s | MFU | peak CUDA memory MiB |")
    print("| --- | --- | --- | --- |")
    base = None
    for name, windows, mem in rows:
        tps = sum(windows[1:]) / max(1, len(windows) - 1)
        base = base or tps
        print(f"| {name} | {tps:,.0f} ({tps / base:.2f}x) | {100 * tps * flops / (args.peak_tflops * 1e12):.1f}% | {mem} |")


if __name__ == "__main__":
    main()
