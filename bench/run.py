"""ltrain against the Python reference (torch DDP under torchrun), side by side in one run.

For each case (model x processes) the two sides run alternately, REPEATS times each, on the same
config with the same threads per process. Reported per side (median over repeats):
  samples/s       median of the train windows after the first (warm-up), all ranks together
  first step      seconds from launching the command to the first optimizer step done
  peak RSS        the largest peak resident set of any rank, MiB
  data wait       share of step time spent waiting for the next batch
and the ratio ltrain/Python, with the issue's targets marked met or missed.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LTRAIN = os.environ.get("LTRAIN_BIN", os.path.join(ROOT, "build", "ltrain"))
REF = os.path.join(ROOT, "bench", "reference", "train_ref.py")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")

CASES = [  # name, config, processes, overrides
    ("MLP", "configs/fashion_mnist_mlp.yaml", 1, ["train.max_steps=240", "train.log_every=30"]),
    ("MLP", "configs/fashion_mnist_mlp.yaml", 2, ["train.max_steps=240", "train.log_every=30"]),
    ("CNN", "configs/fashion_mnist_cnn.yaml", 1, ["train.max_steps=96", "train.log_every=12"]),
    ("CNN", "configs/fashion_mnist_cnn.yaml", 2, ["train.max_steps=96", "train.log_every=12"]),
]
# --gpu: the GPU benchmark of scripts/gpu_check.sh, bf16 autocast, one process per GPU.
GPU_CASES = [
    ("CNN bs1024 bf16", "configs/fashion_mnist_cnn.yaml", 1,
     ["data.batch_size=1024", "train.precision=bf16", "train.max_steps=120", "train.log_every=15"]),
    ("MLP bs4096 bf16", "configs/fashion_mnist_mlp.yaml", 1,
     ["data.batch_size=4096", "train.precision=bf16", "train.max_steps=120", "train.log_every=15"]),
    ("ResNet-18 bs256 bf16", "configs/fashion_mnist_resnet18.yaml", 1,
     ["data.batch_size=256", "train.precision=bf16", "train.max_steps=60", "train.log_every=10"]),
]


def shrunk(overrides):
    """--quick: the same case at a size that runs in seconds on a CPU (checks the script only)."""
    out = []
    for o in overrides:
        key = o.split("=", 1)[0]
        out.append({"data.batch_size": "data.batch_size=32", "train.max_steps": "train.max_steps=8",
                    "train.log_every": "train.log_every=2"}.get(key, o))
    return out
TARGETS = {"samples": {("MLP", 2): 1.3, ("CNN", 2): 1.10}, "first_step": 0.5, "rss": 0.7, "data_wait": 0.02}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_side(side, config, nproc, overrides, out, cores):
    threads = max(1, cores // nproc)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    common = overrides + [f"train.threads={threads}", "train.eval_every=0"]
    if side == "ltrain":
        cmd = [LTRAIN, "train", config, *common, "--output-dir", out]
        if nproc > 1:
            cmd += ["--nproc-per-node", str(nproc)]
    else:
        cmd = [TORCHRUN, "--nproc-per-node", str(nproc), "--master-port", str(free_port()), REF, config, *common,
               "--ltrain", LTRAIN, "--out", out] if nproc > 1 else \
              [sys.executable, REF, config, *common, "--ltrain", LTRAIN, "--out", out]
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{side} failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    summary = json.load(open(os.path.join(out, "summary.json")))
    windows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    windows = [w for w in windows if w["split"] == "train"][1:]  # the first window is warm-up
    return {
        "samples": statistics.median(w["samples_per_s"] for w in windows),
        "first_step": summary["first_step_wall_time"] - start,
        "rss": summary["peak_rss_mb"],
        "data_wait": statistics.mean(w["data_wait_share"] for w in windows),
        "windows": len(windows),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default="all", help="comma-separated indices into the case list")
    ap.add_argument("--gpu", action="store_true", help="the GPU cases (bf16, large batches) instead")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not speed")
    args = ap.parse_args()
    cores = os.cpu_count()
    table = GPU_CASES if args.gpu else CASES
    cases = table if args.cases == "all" else [table[int(i)] for i in args.cases.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config, nproc, overrides in cases:
            if args.quick:
                overrides = shrunk(overrides)
            got = {"ltrain": [], "python": []}
            for rep in range(args.repeats):
                for side in ("ltrain", "python"):  # alternating, so drift hits both sides alike
                    got[side].append(run_side(side, config, nproc, overrides,
                                              os.path.join(tmp, f"{name}{nproc}-{side}-{rep}"), cores))
            med = {s: {k: statistics.median(r[k] for r in got[s]) for k in got[s][0]} for s in got}
            rows.append((name, nproc, med))
            print(f"done: {name} x{nproc}", file=sys.stderr)

    def verdict(ok):
        return "met" if ok else "**missed**"

    print(f"| case | samples/s ltrain | samples/s Python | ratio | first step ltrain | first step Python | ratio "
          f"| peak RSS ltrain | peak RSS Python | ratio | data wait ltrain | data wait Python |")
    print("| --- " * 12 + "|")
    for name, nproc, m in rows:
        lt, py = m["ltrain"], m["python"]
        r_s, r_f, r_r = lt["samples"] / py["samples"], lt["first_step"] / py["first_step"], lt["rss"] / py["rss"]
        target_s = TARGETS["samples"].get((name, nproc))
        s_note = f" ({verdict(r_s >= target_s)} ≥{target_s})" if target_s else ""
        print(f"| {name}, {nproc} proc | {lt['samples']:.0f} | {py['samples']:.0f} | {r_s:.2f}{s_note} "
              f"| {lt['first_step']:.2f} s | {py['first_step']:.2f} s | {r_f:.2f} ({verdict(r_f <= TARGETS['first_step'])}) "
              f"| {lt['rss']:.0f} MiB | {py['rss']:.0f} MiB | {r_r:.2f} ({verdict(r_r <= TARGETS['rss'])}) "
              f"| {100 * lt['data_wait']:.1f}% ({verdict(lt['data_wait'] <= TARGETS['data_wait'])}) "
              f"| {100 * py['data_wait']:.1f}% |")


if __name__ == "__main__":
    main()
