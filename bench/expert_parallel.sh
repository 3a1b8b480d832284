#!/usr/bin/env bash
# dist.expert_parallel on this machine's CPU: a small Mixtral (4 blocks of 256, 8 heads, 8 experts
# of 512 of which each token takes 2, block 128, vocabulary padded to 96: about 13M parameters,
# 12.6M of them experts) trained 30 steps with AdamW on the fortune cookies, two processes of one
# thread, the same global batch of 16 sequences in every row:
#   ep 1: DDP, each process holding all the experts and half the batch;
#   ep 2: each process holding half the experts, tokens exchanged by all-to-all;
#   ep 2, router loss: the same with model.output_router_logits (router_aux_loss_coef 0.02), the
#   load-balancing loss that keeps the routers from sending every token to the same experts.
# Reads parameter_mb, optimizer_state_mb, peak_rss_mb (rank 0) and samples_per_s from summary.json,
# and from the last train record of metrics.jsonl all_to_all_ms_per_step (rank 0's time in the
# all-to-alls, forward and backward) against the step's time, and expert_load_max_over_mean (the
# busiest expert's tokens against an even share, in the least even layer, over the last window).
#   bench/expert_parallel.sh [LTRAIN_BIN]     prints a markdown table
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(model.name=mixtral model.n_layer=4 model.n_embd=256 model.n_head=8 model.n_kv_head=4
  model.intermediate_size=512 model.num_experts=8 model.num_experts_per_tok=2 model.block_size=128
  model.vocab_size=96 model.dropout=0 model.tie_weights=false data.batch_size=8 train.max_steps=30
  train.threads=1 train.eval_every=0 train.log_every=10 train.checkpoint_every=0
  scheduler.name=constant)
echo "| layout | processes | parameters per rank | optimizer state per rank | peak RSS | tokens/s | all-to-all share of a step | busiest expert / mean |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for layout in "ep 1" "ep 2" "ep 2, router loss"; do
  case $layout in
    "ep 1") args=(dist.expert_parallel=1) ;;
    "ep 2") args=(dist.expert_parallel=2) ;;
    *) args=(dist.expert_parallel=2 model.output_router_logits=true model.router_aux_loss_coef=0.02) ;;
  esac
  run=$tmp/${layout//[ ,]/-}
  "$bin" train "$root/configs/gpt_char.yaml" --nproc-per-node 2 "${common[@]}" "${args[@]}" \
    --output-dir "$run" >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
  python3 - "$run" "$layout" <<'PY'
import json, sys
run, layout = sys.argv[1], sys.argv[2]
s = json.load(open(run + "/summary.json"))
last = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"train"' in l][-1]
step_ms = 1000.0 * 16 / last["samples_per_s"]
share = "%.0f%% (%.0f of %.0f ms)" % (100 * last["all_to_all_ms_per_step"] / step_ms,
                                     last["all_to_all_ms_per_step"], step_ms) if "all_to_all_ms_per_step" in last else "-"
print("| %s | 2 | %.1f MiB | %.1f MiB | %.0f MiB | %.0f | %s | %.2f |" % (
    layout, s["parameter_mb"], s["optimizer_state_mb"], s["peak_rss_mb"], 128 * s["samples_per_s"], share,
    last["expert_load_max_over_mean"]))
PY
done
