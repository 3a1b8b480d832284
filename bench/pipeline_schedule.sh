#!/usr/bin/env bash
# GPipe against 1F1B (issue 17): a GPT (8 blocks of 128, 256 tokens, batch 32 in 8 micro-batches)
# split into 2 and 4 pipeline stages on the CPU, one process, 6 steps each. Prints peak RSS above
# a batch-1 baseline (ltrain keeps freed heap, so the high-water mark follows the peak of live
# tensors), samples/s, and each schedule's bubble: the idle share of stage-time when every
# forward takes 1 unit and every backward 2, stages running concurrently as on separate GPUs
# (computed from the schedule's order; on one CPU the stages run in turn and have no bubble).
#   bench/pipeline_schedule.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ltrain=${LTRAIN_BIN:-$root/build/ltrain}
py=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -c "import random; random.seed(0); print(''.join(random.choice('abcdefghij klmnop\n') for _ in range(400000)))" > "$work/t.txt"
common=(data.dataset=text "data.path=$work/t.txt" model.name=gpt model.n_layer=8 model.n_head=4
        model.n_embd=128 model.block_size=256 model.dropout=0 train.log_every=3 train.eval_every=0
        train.threads=2 model.placement=pipeline model.micro_batches=8
        data.eval_batch_size=16)
field() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
bubble() {  # schedule stages micro-batches
  "$py" - "$@" <<'PY'
import sys
sched, S, M = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if sched == "gpipe":
    order = [[m for m in range(M)] + [-(m + 1) for m in reversed(range(M))] for s in range(S)]
else:
    order = []
    for s in range(S):
        w = min(S - 1 - s, M)
        ops = list(range(w))
        for m in range(w, M):
            ops += [m, -(m - w + 1)]
        ops += [-(m + 1) for m in range(M - w, M)]
        order.append(ops)
done, free = {}, [0.0] * S  # (stage, op) -> finish time; when each stage is next free
nxt = [0] * S
while any(nxt[s] < len(order[s]) for s in range(S)):
    for s in range(S):
        if nxt[s] == len(order[s]):
            continue
        op = order[s][nxt[s]]
        if op >= 0:
            dep = done.get((s - 1, op)) if s > 0 else 0.0
        else:
            dep = done.get((s + 1, op)) if s + 1 < S else done.get((s, -op - 1))
        if dep is None:
            continue
        start = max(free[s], dep)
        free[s] = start + (1.0 if op >= 0 else 2.0)
        done[(s, op)] = free[s]
        nxt[s] += 1
span = max(free)
print(f"{1 - 3.0 * M / span:.3f}")
PY
}
echo "| stages | schedule | peak RSS MiB | above batch-1 baseline MiB | samples/s | bubble (computed) |"
echo "|---|---|---|---|---|---|"
for s in 2 4; do
  "$ltrain" train "$root/configs/gpt_char.yaml" "${common[@]}" model.pipeline_stages=$s \
    model.micro_batches=1 data.batch_size=1 train.max_steps=2 --output-dir "$work/base$s" >/dev/null 2>&1
  base=$(field "$work/base$s/summary.json" peak_rss_mb)
  for sched in gpipe 1f1b; do
    "$ltrain" train "$root/configs/gpt_char.yaml" "${common[@]}" model.pipeline_stages=$s \
      model.pipeline_schedule=$sched data.batch_size=32 train.max_steps=6 \
      --output-dir "$work/$sched$s" >/dev/null 2>&1
    rss=$(field "$work/$sched$s/summary.json" peak_rss_mb)
    sps=$(field "$work/$sched$s/summary.json" samples_per_s)
    b=$(bubble $sched $s 8)
    "$py" -c "import sys; s,m,r,b0,x,bb=sys.argv[1:]; print(f'| {s} | {m} | {float(r):.0f} | {float(r)-float(b0):.0f} | {float(x):.1f} | {bb} |')" \
      "$s" "$sched" "$rss" "$base" "$sps" "$b"
  done
done
