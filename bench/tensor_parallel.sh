#!/usr/bin/env bash
# dist.tensor_parallel on this machine's CPU: per-rank parameter memory and throughput of a GPT
# and a llama (4 blocks of 512, 8 heads, block 128, vocabulary padded to 96: about 13M
# parameters) trained 20 steps with AdamW on the fortune cookies, each process one thread, the
# same global batch of 8 sequences in every row:
#   tp 1: one process;  tp 2: two processes, each holding half of every matrix;
#   tp 2 sp: tp 2 with dist.sequence_parallel (norms and residual stream on half the sequence);
#   dp 2: two processes (DDP), each holding the whole model and half the batch;
#   dp 2 x tp 2 zero 3: four processes (two groups of two, ZeRO-3 across them), half the batch
#   each group: on two cores its samples/s is not comparable, its memory is.
# Reads parameter_mb, optimizer_state_mb, peak_rss_mb (rank 0, after the last step) and
# samples_per_s from summary.json.
#   bench/tensor_parallel.sh [LTRAIN_BIN]     prints a markdown table
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s.get(sys.argv[2], 0))" "$1" "$2"; }
common=(model.n_layer=4 model.n_embd=512 model.n_head=8 model.block_size=128 model.vocab_size=96
  model.dropout=0 train.max_steps=20 train.threads=1 train.eval_every=0 train.log_every=10
  train.checkpoint_every=0 scheduler.name=constant)
echo "| model | layout | processes | parameters per rank | optimizer state per rank | peak RSS | samples/s |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for model in gpt llama; do
  extra=()
  [ "$model" = llama ] && extra=(model.name=llama model.n_kv_head=4 model.intermediate_size=1376 model.tie_weights=false)
  for layout in tp1 tp2 "tp2 sp" dp2 "dp2 x tp2 zero3"; do
    case $layout in
      tp1) procs=1; args=(data.batch_size=8) ;;
      tp2) procs=2; args=(data.batch_size=8 dist.tensor_parallel=2) ;;
      "tp2 sp") procs=2; args=(data.batch_size=8 dist.tensor_parallel=2 dist.sequence_parallel=true) ;;
      dp2) procs=2; args=(data.batch_size=4) ;;
      "dp2 x tp2 zero3") procs=4; args=(data.batch_size=4 dist.tensor_parallel=2 dist.zero=3) ;;
    esac
    run=$tmp/$model-${layout// /-}
    "$bin" train "$root/configs/gpt_char.yaml" --nproc-per-node $procs "${common[@]}" ${extra[@]+"${extra[@]}"} \
      "${args[@]}" --output-dir "$run" >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
    s=$run/summary.json
    python3 -c "
print('| $model | $layout | $procs | %.1f MiB | %.1f MiB | %.0f MiB | %.1f |' % (
    $(field $s parameter_mb), $(field $s optimizer_state_mb), $(field $s peak_rss_mb), $(field $s samples_per_s)))"
  done
done
