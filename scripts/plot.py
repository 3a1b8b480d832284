#!/usr/bin/env python3
"""PNG curves for a run directory or a sweep directory.

  plot.py DIR [--out OUTDIR]

A run (DIR/metrics.jsonl): loss.png (train and test loss against step) and accuracy.png (test
accuracy against step).
A sweep (DIR/sweep_summary.csv): sweep_<P>.png for each swept parameter P (the sweep's metric
against P, one line per combination of the other parameters, completed trials only) and
sweep_curves.png (test accuracy against step of every completed trial).
Each file written is printed, one per line. Exit 2, with one line on stderr, when DIR holds
neither file or its contents cannot be read.
"""
import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

import os

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    # Run as README says (scripts/plot.py, the system's python): go on in ltrain's environment,
    # which scripts/setup.sh made and which has matplotlib.
    venv = os.path.join(os.environ.get("LTRAIN_HOME", os.path.expanduser("~/.cache/ltrain")), "venv")
    python = os.path.join(venv, "bin", "python")
    if os.path.isfile(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv) \
            and not os.environ.get("LTRAIN_PLOT_REEXEC"):
        os.environ["LTRAIN_PLOT_REEXEC"] = "1"  # once: a venv without matplotlib ends here
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    print("plot.py: error: matplotlib is not installed "
          "(scripts/setup.sh makes ~/.cache/ltrain/venv with it)", file=sys.stderr)
    sys.exit(2)

try:
    import yaml
except ImportError:  # names fall back to directory names, the sweep metric to test_accuracy
    yaml = None


class PlotError(Exception):
    pass


def finite(v):
    """v as a float when it is a finite number (not null, not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def read_yaml(path):
    if yaml is None or not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None


def read_metrics(path):
    """{split: {step: record}} from a metrics.jsonl; a later record for a step replaces an earlier
    one (a resumed run may report a step again) and lines that do not parse (one being written)
    are skipped."""
    by_split = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            step = finite(rec.get("step"))
            if step is None:
                continue
            by_split.setdefault(rec.get("split"), {})[step] = rec
    return by_split


def series(by_split, split, key):
    """(steps, values) of `key` in `split`, ordered by step, null and non-finite values skipped."""
    xs, ys = [], []
    for step, rec in sorted(by_split.get(split, {}).items()):
        v = finite(rec.get(key))
        if v is not None:
            xs.append(step)
            ys.append(v)
    return xs, ys


def run_name(run_dir):
    cfg = read_yaml(run_dir / "config.yaml")
    if isinstance(cfg, dict) and isinstance(cfg.get("name"), str) and cfg["name"]:
        return cfg["name"]
    return run_dir.resolve().name


def save(fig, path):
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(path)


def note_if_empty(ax, empty, text):
    if empty:
        ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")


def plot_run(run_dir, out):
    by_split = read_metrics(run_dir / "metrics.jsonl")
    name = run_name(run_dir)
    # The held-out split: "test", or "val" for a language model (which also reports perplexity).
    held = "val" if "val" in by_split else "test"

    fig, ax = plt.subplots(figsize=(7, 4.5))
    train = series(by_split, "train", "loss")
    test = series(by_split, held, "loss")
    ax.plot(*train, label="train loss", linewidth=1.2)
    ax.plot(*test, label=f"{held} loss", marker="o", linewidth=1.5)
    note_if_empty(ax, not train[0] and not test[0], "no losses reported yet")
    ax.set(title=f"{name}: loss", xlabel="step", ylabel="loss")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, out / "loss.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    acc = series(by_split, held, "accuracy")
    label = "next-token accuracy" if held == "val" else "test accuracy"
    ax.plot(*acc, marker="o", color="tab:green", label=f"{held} {label}")
    note_if_empty(ax, not acc[0], f"no {held} evaluation yet")
    ax.set(title=f"{name}: {label}", xlabel="step", ylabel=label)
    ax.grid(True, alpha=0.3)
    save(fig, out / "accuracy.png")

    if held == "val":
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(*series(by_split, "val", "perplexity"), marker="o", color="tab:purple")
        ax.set(title=f"{name}: validation perplexity", xlabel="step", ylabel="perplexity")
        ax.grid(True, alpha=0.3)
        save(fig, out / "perplexity.png")


def to_number(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def value_order(values):
    """A sort key for a tuple of CSV values: numbers by value, before other values by text."""
    return tuple((0, n, "") if (n := to_number(v)) is not None else (1, 0.0, v) for v in values)


def safe_filename(s):
    return re.sub(r"[^A-Za-z0-9._-]", "_", s)


def line_colors(n):
    if n <= 10:
        cmap, scale = plt.get_cmap("tab10"), 1
    elif n <= 20:
        cmap, scale = plt.get_cmap("tab20"), 1
    else:
        cmap, scale = plt.get_cmap("viridis"), 1 / (n - 1)
    return [cmap(i * scale) for i in range(n)]


def find_trial_dir(sweep_dir, row):
    """The run directory of a trial: its run_dir column (absolute, relative to the sweep directory,
    its last component there, or relative to here), else the subdirectory named <NNN>-..."""
    rd = (row.get("run_dir") or "").strip()
    if rd:
        p = Path(rd)
        for cand in ([p] if p.is_absolute() else [sweep_dir / p, p]) + [sweep_dir / p.name]:
            if (cand / "metrics.jsonl").is_file():
                return cand
    trial = to_number(row.get("trial"))
    if trial is not None:
        prefix = f"{int(trial):03d}-"
        for cand in sorted(sweep_dir.iterdir()):
            if cand.is_dir() and cand.name.startswith(prefix):
                return cand
    return None


def plot_sweep(sweep_dir, out):
    with open(sweep_dir / "sweep_summary.csv", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        rows = list(reader)
    if "status" not in columns:
        raise PlotError(f"{sweep_dir / 'sweep_summary.csv'} has no status column")

    spec = read_yaml(sweep_dir / "sweep.yaml")
    spec = spec if isinstance(spec, dict) else {}
    sweep = spec.get("sweep") if isinstance(spec.get("sweep"), dict) else {}
    metric = sweep.get("metric") if isinstance(sweep.get("metric"), str) else "test_accuracy"
    if metric not in columns:
        raise PlotError(f"the sweep metric '{metric}' is not a column of sweep_summary.csv")
    params = [k for k in spec.get("params") or {} if k in columns] \
        if isinstance(spec.get("params"), dict) else []
    if not params:
        start = columns.index("status") + 1
        end = columns.index("test_accuracy") if "test_accuracy" in columns else start
        params = columns[start:end]

    done = [r for r in rows if (r.get("status") or "").strip() == "completed"
            and to_number(r.get(metric)) is not None]
    if not done:
        print(f"plot.py: warning: no completed trials in {sweep_dir}", file=sys.stderr)
    title = sweep_dir.resolve().name

    for p in params if done else []:
        others = [q for q in params if q != p]
        values = [r.get(p, "") for r in done]
        nums = [to_number(v) for v in values]
        numeric = all(v is not None for v in nums)
        if numeric:
            xpos = {v: n for v, n in zip(values, nums)}
        else:  # categorical: positions in the order the values first appear in the CSV
            order = []
            for r in rows:
                if r.get(p, "") not in order:
                    order.append(r.get(p, ""))
            xpos = {v: i for i, v in enumerate(order)}
        groups = {}
        for r in done:
            key = tuple(r.get(q, "") for q in others)
            groups.setdefault(key, []).append((xpos[r.get(p, "")], to_number(r[metric])))

        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = line_colors(len(groups))
        ordered = sorted(groups.items(), key=lambda kv: value_order(kv[0]))
        for color, (key, pts) in zip(colors, ordered):
            pts.sort()
            label = ", ".join(f"{q}={v}" for q, v in zip(others, key)) or None
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=color, label=label)
        if numeric:
            # A rate is read in orders of magnitude (0.01, 0.03, 0.1 equally apart), as is a
            # loguniform draw or any positive range of 10x or more.
            declared = str((spec.get("params") or {}).get(p, "")) if isinstance(spec.get("params"), dict) else ""
            rate = p.rsplit(".", 1)[-1] in ("lr", "min_lr", "weight_decay", "eps") or "loguniform" in declared
            if min(nums) > 0 and (rate or max(nums) >= 10 * min(nums)):
                ax.set_xscale("log")
        else:
            ax.set_xticks(list(xpos.values()))
            ax.set_xticklabels(list(xpos.keys()), rotation=30 if len(xpos) > 4 else 0)
        mode = sweep.get("mode")
        ax.set(title=f"{title}: {metric} vs {p}" + (f" ({mode})" if mode in ("max", "min") else ""),
               xlabel=p, ylabel=metric)
        ax.grid(True, alpha=0.3)
        if others:
            ax.legend(fontsize="small")
        save(fig, out / f"sweep_{safe_filename(p)}.png")

    curves = []
    for r in rows:
        if (r.get("status") or "").strip() != "completed":
            continue
        d = find_trial_dir(sweep_dir, r)
        if d is None:
            print(f"plot.py: warning: no run directory with metrics.jsonl for trial "
                  f"{r.get('trial', '?')}", file=sys.stderr)
            continue
        curves.append((d.name, series(read_metrics(d / "metrics.jsonl"), "test", "accuracy")))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for color, (name, (xs, ys)) in zip(line_colors(len(curves)), curves):
        ax.plot(xs, ys, marker=".", color=color, label=name, linewidth=1.2)
    note_if_empty(ax, not any(xs for _, (xs, _) in curves), "no completed trial with test accuracy")
    ax.set(title=f"{title}: test accuracy of completed trials", xlabel="step",
           ylabel="test accuracy")
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if len(curves) <= 25 else 2, frameon=False)
    save(fig, out / "sweep_curves.png")


def main():
    ap = argparse.ArgumentParser(
        prog="plot.py", description="PNG curves for an ltrain run directory or sweep directory.")
    ap.add_argument("dir", metavar="DIR", help="a run directory (metrics.jsonl) or a sweep "
                    "directory (sweep_summary.csv)")
    ap.add_argument("--out", metavar="OUTDIR", help="where the PNG files go (default: DIR)")
    args = ap.parse_args()
    d = Path(args.dir)
    out = Path(args.out) if args.out else d
    try:
        if (d / "sweep_summary.csv").is_file():
            out.mkdir(parents=True, exist_ok=True)
            plot_sweep(d, out)
        elif (d / "metrics.jsonl").is_file():
            out.mkdir(parents=True, exist_ok=True)
            plot_run(d, out)
        else:
            raise PlotError(f"{args.dir} holds neither metrics.jsonl nor sweep_summary.csv")
    except (PlotError, OSError, csv.Error, UnicodeDecodeError) as e:
        msg = str(e) if isinstance(e, PlotError) else f"{type(e).__name__}: {e}"
        print(f"plot.py: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
