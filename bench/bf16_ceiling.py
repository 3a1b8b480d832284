"""The device's dense bf16 ceiling, measured: the best TFLOP/s of square bf16 matrix products
(8192^3 by default, the size at which an H100/H200 reaches its sustained peak), against which
scripts/gpu_check.sh reports MFU beside the datasheet's figure. On a machine without a GPU it
times the CPU (a dry run checks the script, not the number). Prints one number last: TFLOP/s.

  python bench/bf16_ceiling.py [--size 8192] [--repeats 30]
"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n = args.size
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    best = 0.0
    for _ in range(3):  # the best of three timed runs, each after its own warm-up product
        torch.mm(a, b)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.repeats):
            torch.mm(a, b)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 2 * n ** 3 * args.repeats / (time.perf_counter() - t) / 1e12)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "CPU"
    print(f"{name}: {n}^3 bf16 matrix products, best of 3 x {args.repeats}")
    print(f"{best:.1f}" if best >= 1 else f"{best:.4f}")


if __name__ == "__main__":
    main()
