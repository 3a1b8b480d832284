#!/usr/bin/env bash
# Peak memory per rank of ltrain's ZeRO-3 against PyTorch's fully_shard (FSDP2) on the same GPT,
# under the real torchrun, for 1, 2 and 4 processes (one process: plain training on both sides).
# The issue's model: 24 blocks of 1024 (302M parameters, P = 1154 MiB of fp32), block 64, batch 1,
# AdamW, 3 steps, Gloo on the CPU, tokens cut from the fortune cookies by prepare_tokens.py. Each
# side's figure is its worst rank's peak RSS (summary.json's peak_rss_mb; train_ref.py's is its
# ranks' ru_maxrss); the share is (P + G + 2P) / W, the start what a rank holds before the model.
# samples/s: each summary's, over the 3 steps.
#   bench/zero3_vs_fully_shard.sh [LTRAIN_BIN]    prints a markdown table
#   KEEP_LOGS=DIR: each run's LTRAIN_MEMORY_LOG (per phase and category) is kept there
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
venv=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" "$root/scripts/prepare_tokens.py" /usr/share/games/fortunes/cookie \
  --out "$tmp/tokens" --vocab-size 256 >/dev/null 2>&1
keys=(data.dataset=tokens data.path=$tmp/tokens "data.train_files=train_*.bin"
  "data.val_files=val_*.bin" model.vocab_size=256 model.n_layer=${LAYERS:-24} model.n_embd=1024
  model.n_head=16 model.block_size=64 model.dropout=0 data.batch_size=1 data.eval_batch_size=1
  optimizer.name=adamw optimizer.lr=0.0001 train.max_steps=3 train.log_every=1 train.eval_every=0
  train.checkpoint_every=0 train.threads=1)
peak() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$1"; }
speed() { python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['samples_per_s'])" "$1"; }
# The library floor: what a rank holds whatever the model (LibTorch and its code paged in as
# kernels first run, threads, the data, the shared-memory collectives' segment):
# LTRAIN_MEMORY_LOG's "libraries", the largest rank's.
start() {
  python3 -c "import json,sys; print(round(max(json.loads(l)['categories_mb']['libraries'] for l in open(sys.argv[1]))))" "$1"
}
P=$(python3 -c "print(round(${LAYERS:-24} * 12.6e6 * 4 / 2**20))")  # about 12.6M a block
echo "| processes | share (P+G+2P)/W | ltrain library floor | ltrain peak | peak / (share + floor) | fully_shard peak | ltrain / fully_shard | samples/s ltrain, fully_shard |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for w in 1 2 4; do
  zero=3; [ "$w" -eq 1 ] && zero=0
  LTRAIN_MEMORY_LOG=$tmp/memory-$w.jsonl "$bin" train "$root/configs/gpt_char.yaml" \
    --nproc-per-node "$w" "${keys[@]}" dist.zero=$zero --output-dir "$tmp/ltrain-$w" \
    >"$tmp/ltrain-$w.log" 2>&1 || { tail -5 "$tmp/ltrain-$w.log"; exit 1; }
  fsdp=(); [ "$w" -gt 1 ] && fsdp=(--fsdp)
  "$venv/bin/torchrun" --standalone --nproc-per-node "$w" "$root/bench/reference/train_ref.py" \
    "$root/configs/gpt_char.yaml" "${keys[@]}" dist.zero=$zero --ltrain "$bin" --out "$tmp/torch-$w" \
    "${fsdp[@]}" >"$tmp/torch-$w.log" 2>&1 || { tail -5 "$tmp/torch-$w.log"; exit 1; }
  a=$(peak "$tmp/ltrain-$w/summary.json"); b=$(peak "$tmp/torch-$w/summary.json")
  s=$(start "$tmp/memory-$w.jsonl")
  sa=$(speed "$tmp/ltrain-$w/summary.json"); sb=$(speed "$tmp/torch-$w/summary.json")
  python3 -c "print('| %d | %d MiB | %d MiB | %d MiB | %.2f | %d MiB | %.2f | %s, %s |' % ($w, 4 * $P / $w, $s, $a, $a / (4 * $P / $w + $s), $b, $a / $b, '$sa', '$sb'))"
  if [ -n "${KEEP_LOGS:-}" ]; then cp "$tmp/memory-$w.jsonl" "$KEEP_LOGS/"; fi
done
