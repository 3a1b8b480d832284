#!/usr/bin/env bash
# Trains the Fashion-MNIST configs and prints, for each, the final test accuracy, the published
# figure it is held to, the wall time, and the time until the first evaluation at or above it.
#   bench/fashion_mnist_accuracy.sh [EXTRA ltrain ARGS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PY=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
out=$(mktemp -d)
printf '| config | processes | test accuracy | target (published) | time to target | wall time |\n| --- | --- | --- | --- | --- | --- |\n'
for spec in "fashion_mnist_mlp 0.88" "fashion_mnist_cnn 0.91"; do
  set -- $spec "${@:3}"
  name=$1 target=$2
  "$root/build/ltrain" train "$root/configs/$name.yaml" "${@:3}" --output-dir "$out/$name" >"$out/$name.log" 2>&1
  "$PY" - "$out/$name" "$name" "$target" "${LTRAIN_NPROC:-1}" <<'PYEOF'
import json, sys
run, name, target, nproc = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
summ = json.load(open(run + "/summary.json"))
first = next((r for r in recs if r["split"] == "test" and r["accuracy"] >= target), None)
t0 = recs[-1]["wall_time"] - summ["wall_s"]
ttt = f"{first['wall_time'] - t0:.0f} s (step {first['step']})" if first else "not reached"
print(f"| {name} | {nproc} | {summ['test_accuracy']:.4f} | {target} | {ttt} | {summ['wall_s']:.0f} s |")
PYEOF
done
rm -rf "$out"
