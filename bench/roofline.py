"""The roofline of the 1-process Fashion-MNIST MLP (issue 18): what this machine's sgemm does at
the step's own matrix shapes, against what ltrain's training step achieves.

  FLOPs per example   forward 2*in*out per layer, backward 2*in*out for each weight gradient and
                      2*in*out for each input gradient but the first layer's (its input needs none)
  roofline            the same GEMMs timed alone through torch.mm at batch B with T threads (the
                      shapes forward, input gradient and weight gradient each use), and a large
                      2048^3 sgemm for the machine's peak
  achieved            ltrain's samples/s (median of the windows after the first) x FLOPs/example

  bench/roofline.py [--threads 2] [--batch 128] [--steps 240]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LTRAIN = os.environ.get("LTRAIN_BIN", os.path.join(ROOT, "build", "ltrain"))
LAYERS = [784, 256, 128, 100, 10]  # configs/fashion_mnist_mlp.yaml


def gemm_seconds(m, k, n, repeats=200):
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(10):
        torch.mm(a, b)
    t = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    return (time.perf_counter() - t) / repeats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=240)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B = a.batch
    flops, seconds = 0.0, 0.0
    rows = []
    for i, (k, n) in enumerate(zip(LAYERS[:-1], LAYERS[1:])):
        shapes = [("forward", B, k, n), ("weight grad", k, B, n)]
        if i > 0:
            shapes.append(("input grad", B, n, k))
        for what, m, kk, nn in shapes:
            s = gemm_seconds(m, kk, nn)
            f = 2.0 * m * kk * nn
            flops += f
            seconds += s
            rows.append((f"layer {i} {what} [{m}x{kk}]x[{kk}x{nn}]", f / s / 1e9))
    step_roofline = flops / seconds / 1e9
    big = 2048
    peak = 2.0 * big ** 3 / gemm_seconds(big, big, big, repeats=5) / 1e9
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([LTRAIN, "train", os.path.join(ROOT, "configs", "fashion_mnist_mlp.yaml"),
                        f"train.threads={a.threads}", f"data.batch_size={B}",
                        f"train.max_steps={a.steps}", "train.log_every=30", "--output-dir",
                        os.path.join(d, "run")], check=True, capture_output=True)
        windows = [json.loads(line) for line in open(os.path.join(d, "run", "metrics.jsonl"))]
        windows = [w for w in windows if w.get("split") == "train"][1:]
        sps = statistics.median(w["samples_per_s"] for w in windows)
    per_example = flops / B
    achieved = sps * per_example / 1e9
    print(f"{a.threads} threads, batch {B}; MLP {'-'.join(map(str, LAYERS))}: "
          f"{per_example / 1e6:.2f} MFLOP per example\n")
    print("| GEMM | GFLOP/s |\n|---|---|")
    for name, g in rows:
        print(f"| {name} | {g:.1f} |")
    print(f"| the step's GEMMs together | {step_roofline:.1f} |")
    print(f"| sgemm 2048^3 (peak) | {peak:.1f} |\n")
    print("| ltrain samples/s | achieved GFLOP/s | of the step's roofline | of peak | target |")
    print("|---|---|---|---|---|")
    frac = achieved / step_roofline
    print(f"| {sps:.0f} | {achieved:.1f} | {100 * frac:.0f}% | {100 * achieved / peak:.0f}% | "
          f">= 60% of roofline: {'met' if frac >= 0.6 else 'missed'} |")


if __name__ == "__main__":
    main()
