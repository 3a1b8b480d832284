#!/usr/bin/env bash
# Gradients and optimizer state per rank under dist.zero 0, 1 and 2, for 1, 2 and 4 processes: a
# GPT of 3.2M parameters (12.4 MiB of fp32 parameters; AdamW: two moments each, 25 MiB) trained 10
# steps on the CPU. Reads gradient_mb and optimizer_state_mb (the largest rank's, after the last
# step) and peak_rss_mb from summary.json.
#   bench/zero_memory.sh [LTRAIN_BIN]     prints a markdown table
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=/usr/share/games/fortunes/cookie
echo "| processes | dist.zero | gradients per rank (MiB) | optimizer state per rank (MiB) | state vs. unsharded | peak RSS per rank (MiB) |"
echo "| --- | --- | --- | --- | --- | --- |"
for procs in 1 2 4; do
  base=""
  for zero in 0 1 2; do
    [ "$procs" -eq 1 ] && [ "$zero" -ge 1 ] && continue  # one process has nothing to shard with
    "$bin" train "$root/configs/gpt_char.yaml" --nproc-per-node "$procs" model.n_layer=4 model.n_embd=256 \
      model.n_head=4 data.path=$text train.max_steps=10 train.threads=1 dist.zero=$zero \
      --output-dir "$tmp/p$procs-z$zero" >/dev/null 2>&1
    read -r g mb rss < <(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['gradient_mb'], s['optimizer_state_mb'], s['peak_rss_mb'])" "$tmp/p$procs-z$zero/summary.json")
    base=${base:-$mb}
    printf '| %s | %s | %.2f | %.2f | %.2f | %.0f |\n' "$procs" "$zero" "$g" "$mb" "$(python3 -c "print($mb / $base)")" "$rss"
  done
done
