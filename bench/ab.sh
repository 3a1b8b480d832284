#!/usr/bin/env bash
# Two ltrain binaries side by side on one config, alternating, samples/s from each summary.json:
#   bench/ab.sh OLD_BIN NEW_BIN [RUNS=6] [CONFIG=configs/fashion_mnist_mlp.yaml] [ARGS...]
# (build an older commit with: git worktree add /tmp/old REV && LTRAIN_BUILD_DIR=/tmp/old/build
#  /tmp/old/scripts/build.sh). Default ARGS: train.epochs=1 --nproc-per-node 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${1:?usage: bench/ab.sh OLD_BIN NEW_BIN [RUNS] [CONFIG] [ARGS...]}
new=${2:?usage: bench/ab.sh OLD_BIN NEW_BIN [RUNS] [CONFIG] [ARGS...]}
runs=${3:-6}
cfg=${4:-$root/configs/fashion_mnist_mlp.yaml}
shift $(($# < 4 ? $# : 4))
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(train.epochs=1 --nproc-per-node 2)
py=${LTRAIN_PYTHON:-$HOME/.cache/ltrain/venv/bin/python}
work=$(mktemp -d /tmp/ltrain-ab-XXXXXX)
for i in $(seq "$runs"); do
  for v in old new; do
    bin=$old; [ $v = new ] && bin=$new
    rm -rf "$work/$v"
    "$bin" train "$cfg" "${args[@]}" --output-dir "$work/$v" >/dev/null 2>&1
    "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['samples_per_s']), d['test_accuracy'])" "$work/$v/summary.json" $v
  done
done | awk '{print; s[$1]+=$2; n[$1]++} END {printf "mean samples/s: old %.0f, new %.0f (%+.1f%%)\n", s["old"]/n["old"], s["new"]/n["new"], 100*(s["new"]/n["new"]/(s["old"]/n["old"])-1)}'
rm -rf "$work"
