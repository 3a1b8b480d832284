"""ltrain against the Python reference (torch DDP under torchrun), side by side in one run.

For each case (model x processes) the two sides run alternately, REPEATS times each, on the same
config with the same threads per process. Reported per side (median over repeats):
  samples/s       median of the train windows after the first (warm-up), all ranks together
  first step      seconds from launching the command to the first optimizer step done
  peak RSS        the largest peak resident set of any rank, MiB
  data wait       share of step time spent waiting for the next batch
  GFLOP/s         samples/s x the training FLOPs per example (forward and backward, counted by
                  torch.utils.flop_counter on the reference model), and its share of the
                  machine's roofline: a 2048^3 sgemm on all its cores (bench/roofline.py has the
                  MLP's roofline at its own matrix shapes)
and the ratio ltrain/Python, with the issue's targets marked met or missed. A start-up case (8
processes of the MLP on this machine's cores) reports its first step only.
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
    ("ResNet-18", "configs/fashion_mnist_resnet18_cpu.yaml", 1, ["train.max_steps=16", "train.log_every=4"]),
    ("ResNet-18", "configs/fashion_mnist_resnet18_cpu.yaml", 2, ["train.max_steps=16", "train.log_every=4"]),
    ("GPT", "configs/gpt_char.yaml", 1, ["TOKENS", "train.max_steps=40", "train.log_every=10"]),
    ("GPT", "configs/gpt_char.yaml", 2, ["TOKENS", "train.max_steps=40", "train.log_every=10"]),
    ("MLP start-up", "configs/fashion_mnist_mlp.yaml", 8, ["train.max_steps=4", "train.log_every=1"]),
]
# The GPT cases read BPE token shards of the fortunes (scripts/prepare_tokens.py), made once.
TOKENS_VOCAB = 512
# --gpu: the GPU benchmark of scripts/gpu_check.sh, bf16 autocast, one process per GPU.
GPU_CASES = [
    ("CNN bs1024 bf16", "configs/fashion_mnist_cnn.yaml", 1,
     ["data.batch_size=1024", "train.precision=bf16", "train.max_steps=120", "train.log_every=15"]),
    ("MLP bs4096 bf16", "configs/fashion_mnist_mlp.yaml", 1,
     ["data.batch_size=4096", "train.precision=bf16", "train.max_steps=120", "train.log_every=15"]),
    ("ResNet-18 bs256 bf16", "configs/fashion_mnist_resnet18.yaml", 1,
     ["data.batch_size=256", "train.precision=bf16", "train.max_steps=60", "train.log_every=10"]),
]


def shrunk(config, overrides):
    """--quick: the same case at a size that runs in seconds on a CPU (checks the script only)."""
    out = ["model.width=8"] if "resnet" in config else []  # a width-64 ResNet-18 takes minutes
    for o in overrides:
        key = o.split("=", 1)[0]
        out.append({"data.batch_size": "data.batch_size=32", "train.max_steps": "train.max_steps=8",
                    "train.log_every": "train.log_every=2"}.get(key, o))
    return out
# Issue 18: 1.3x Python's samples/s in every case, start-up at most 0.25x, RSS at most 0.7x.
TARGETS = {"samples": 1.3, "first_step": 0.25, "rss": 0.7, "data_wait": 0.02}


def prepare_tokens(tmp):
    out = os.path.join(tmp, "tokens")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_tokens.py"),
                    "/usr/share/games/fortunes/cookie", "--out", out, "--vocab-size", str(TOKENS_VOCAB)],
                   check=True, capture_output=True)
    return ["data.dataset=tokens", f"data.path={out}", "data.train_files=train_*.bin",
            "data.val_files=val_*.bin", f"model.vocab_size={TOKENS_VOCAB}", "model.block_size=64",
            "data.batch_size=16"]


def flops_per_example(config, overrides):
    out = subprocess.run([sys.executable, REF, config, *overrides, "--ltrain", LTRAIN, "--out", "/tmp",
                          "--flops"], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["flops_per_example"]


def sgemm_gflops(threads):
    import torch
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(3):
        torch.mm(a, b)
    t = time.perf_counter()
    for _ in range(10):
        torch.mm(a, b)
    return 2 * 2048 ** 3 * 10 / (time.perf_counter() - t) / 1e9


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
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="--gpu: the measured dense bf16 ceiling (bench/bf16_ceiling.py) for MFU")
    ap.add_argument("--datasheet-tflops", type=float, default=989.0,
                    help="--gpu: the datasheet's dense bf16 peak for MFU (989: H100/H200 SXM)")
    args = ap.parse_args()
    cores = os.cpu_count()
    table = GPU_CASES if args.gpu else CASES
    cases = table if args.cases == "all" else [table[int(i)] for i in args.cases.split(",")]
    rows = []
    # On a GPU the CPU's sgemm is no roofline: MFU against the device's bf16 ceilings instead.
    roofline = None if args.gpu else sgemm_gflops(cores)
    with tempfile.TemporaryDirectory() as tmp:
        tokens = None
        for name, config, nproc, overrides in cases:
            if "TOKENS" in overrides:
                tokens = tokens or prepare_tokens(tmp)
                overrides = tokens + [o for o in overrides if o != "TOKENS"]
            if args.quick:
                overrides = shrunk(config, overrides)
            got = {"ltrain": [], "python": []}
            for rep in range(args.repeats):
                for side in ("ltrain", "python"):  # alternating, so drift hits both sides alike
                    got[side].append(run_side(side, config, nproc, overrides,
                                              os.path.join(tmp, f"{name}{nproc}-{side}-{rep}"), cores))
            med = {s: {k: statistics.median(r[k] for r in got[s]) for k in got[s][0]} for s in got}
            flops = flops_per_example(config, overrides) if "start-up" not in name else 0
            rows.append((name, nproc, med, flops))
            print(f"done: {name} x{nproc}", file=sys.stderr)

    def verdict(ok):
        return "met" if ok else "**missed**"

    if args.gpu:
        gpu_table(rows, args.peak_tflops, args.datasheet_tflops)
        return
    print(f"Roofline: a 2048^3 sgemm on {cores} threads, {roofline:.0f} GFLOP/s.\n")
    print("| case | samples/s ltrain | samples/s Python | ratio | GFLOP/s ltrain (of roofline) | GFLOP/s Python "
          "| first step ltrain | first step Python | ratio | peak RSS ltrain | peak RSS Python | ratio "
          "| data wait ltrain | data wait Python |")
    print("| --- " * 14 + "|")
    for name, nproc, m, flops in rows:
        lt, py = m["ltrain"], m["python"]
        r_s, r_f, r_r = lt["samples"] / py["samples"], lt["first_step"] / py["first_step"], lt["rss"] / py["rss"]
        first = (f"| {lt['first_step']:.2f} s | {py['first_step']:.2f} s "
                 f"| {r_f:.2f} ({verdict(r_f <= TARGETS['first_step'])} ≤{TARGETS['first_step']}) ")
        if flops == 0:  # the start-up case
            print(f"| {name}, {nproc} proc | - | - | - | - | - {first}| - | - | - | - | - |")
            continue
        g_lt, g_py = lt["samples"] * flops / 1e9, py["samples"] * flops / 1e9
        print(f"| {name}, {nproc} proc | {lt['samples']:.0f} | {py['samples']:.0f} "
              f"| {r_s:.2f} ({verdict(r_s >= TARGETS['samples'])} ≥{TARGETS['samples']}) "
              f"| {g_lt:.1f} ({100 * g_lt / roofline:.0f}%) | {g_py:.1f} {first}"
              f"| {lt['rss']:.0f} MiB | {py['rss']:.0f} MiB | {r_r:.2f} ({verdict(r_r <= TARGETS['rss'])}) "
              f"| {100 * lt['data_wait']:.1f}% ({verdict(lt['data_wait'] <= TARGETS['data_wait'])}) "
              f"| {100 * py['data_wait']:.1f}% |")


def gpu_table(rows, measured, datasheet):
    """The GPU cases: samples/s, MFU against the measured bf16 ceiling and the datasheet's, peak
    memory of the process (RSS; the CUDA peak is in each run's summary.json)."""
    def mfu(samples, flops, peak):
        return f"{100 * samples * flops / (peak * 1e12):.2f}%" if peak > 0 else "-"
    print(f"MFU: model FLOPs x samples/s over the measured dense bf16 ceiling ({measured:.1f} TFLOP/s, "
          f"bench/bf16_ceiling.py) / over the datasheet's ({datasheet:.0f} TFLOP/s).\n")
    print("| case | samples/s ltrain | samples/s Python | ratio | MFU ltrain (measured / datasheet) "
          "| MFU Python (measured / datasheet) | first step ltrain | first step Python | peak RSS ltrain "
          "| peak RSS Python |")
    print("| --- " * 10 + "|")
    for name, nproc, m, flops in rows:
        lt, py = m["ltrain"], m["python"]
        print(f"| {name}, {nproc} proc | {lt['samples']:.0f} | {py['samples']:.0f} "
              f"| {lt['samples'] / py['samples']:.2f} "
              f"| {mfu(lt['samples'], flops, measured)} / {mfu(lt['samples'], flops, datasheet)} "
              f"| {mfu(py['samples'], flops, measured)} / {mfu(py['samples'], flops, datasheet)} "
              f"| {lt['first_step']:.2f} s | {py['first_step']:.2f} s "
              f"| {lt['rss']:.0f} MiB | {py['rss']:.0f} MiB |")


if __name__ == "__main__":
    main()
