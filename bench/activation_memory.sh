#!/usr/bin/env bash
# Activation checkpointing's memory and time (issue 17): a GPT (8 blocks of 128, batch 16) at two
# block sizes, train.activation_checkpointing none against blocks, 6 steps each, one process.
# Prints peak RSS (the process's high-water mark: ltrain keeps freed heap for reuse, so it
# follows the peak of live tensors), peak RSS above an untrained baseline (the same model and
# data, batch 1) and samples/s.
#   bench/activation_memory.sh [BLOCK_SIZES...]   (default: 256 512)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ltrain=${LTRAIN_BIN:-$root/build/ltrain}
py=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A corpus of printable text, big enough for every block size's batches.
"$py" -c "import random; random.seed(0); print(''.join(random.choice('abcdefghij klmnop\n') for _ in range(400000)))" > "$work/t.txt"
common=(data.dataset=text "data.path=$work/t.txt" model.name=gpt model.n_layer=8 model.n_head=4
        model.n_embd=128 model.dropout=0.1 train.max_steps=6 train.log_every=3 train.eval_every=0
        train.threads=2 data.eval_batch_size=16)
field() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
echo "| block size | checkpointing | peak RSS MiB | above batch-1 baseline MiB | samples/s |"
echo "|---|---|---|---|---|"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 512)
for t1 in "${sizes[@]}"; do
  {
    "$ltrain" train "$root/configs/gpt_char.yaml" "${common[@]}" model.block_size=$t1 \
      data.batch_size=1 train.max_steps=2 --output-dir "$work/base$t1" >/dev/null 2>&1
    base=$(field "$work/base$t1/summary.json" peak_rss_mb)
    for mode in none blocks; do
      "$ltrain" train "$root/configs/gpt_char.yaml" "${common[@]}" model.block_size=$t1 \
        data.batch_size=16 train.activation_checkpointing=$mode --output-dir "$work/$mode$t1" >/dev/null 2>&1
      rss=$(field "$work/$mode$t1/summary.json" peak_rss_mb)
      sps=$(field "$work/$mode$t1/summary.json" samples_per_s)
      "$py" -c "import sys; t,m,r,b,s=sys.argv[1:]; print(f'| {t} | {m} | {float(r):.0f} | {float(r)-float(b):.0f} | {float(s):.1f} |')" \
        "$t1" "$mode" "$rss" "$base" "$sps"
    done
  }
done
