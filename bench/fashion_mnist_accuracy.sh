#!/usr/bin/env bash
# Trains the Fashion-MNIST configs and prints, for each, the final test accuracy, the published
# figure it is held to, the wall time, and the time until the first evaluation at or above it.
#   bench/fashion_mnist_accuracy.sh [EXTRA ltrain train ARGS...]
# e.g. with 2 processes and the same global batch of 128:
#   bench/fashion_mnist_accuracy.sh --nproc-per-node 2 data.batch_size=64
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PY=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
extra=("$@")
nproc=1
for ((i = 0; i < ${#extra[@]}; i++)); do
  [ "${extra[$i]}" = --nproc-per-node ] && nproc=${extra[$((i + 1))]}
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '| config | processes | test accuracy | target (published) | time to target | wall time |\n'
printf '| --- | --- | --- | --- | --- | --- |\n'
# CONFIGS="name target ..." picks others, e.g. CONFIGS="fashion_mnist_resnet18_cpu 0.93".
read -r -a specs <<<"${CONFIGS:-fashion_mnist_mlp 0.88 fashion_mnist_cnn 0.91}"
for ((k = 0; k < ${#specs[@]}; k += 2)); do
  spec="${specs[$k]} ${specs[$((k + 1))]}"
  read -r name target <<<"$spec"
  "$root/build/ltrain" train "$root/configs/$name.yaml" "${extra[@]}" --output-dir "$out/$name" \
    >"$out/$name.log" 2>&1 || { cat "$out/$name.log" >&2; exit 1; }
  "$PY" - "$out/$name" "$name" "$target" "$nproc" <<'PYEOF'
import json, sys
run, name, target, nproc = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
summ = json.load(open(run + "/summary.json"))
t0 = recs[-1]["wall_time"] - summ["wall_s"]  # the summary's wall time ends at the last record
first = next((r for r in recs if r["split"] == "test" and r["accuracy"] >= target), None)
ttt = f"{first['wall_time'] - t0:.0f} s (step {first['step']})" if first else "not reached"
print(f"| {name} | {nproc} | {summ['test_accuracy']:.4f} | {target} | {ttt} | {summ['wall_s']:.0f} s |")
PYEOF
done
