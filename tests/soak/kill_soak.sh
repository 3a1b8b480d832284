#!/usr/bin/env bash
# Kill soak (not part of CI): a 2-process job takes KILLS SIGKILLs of random workers at random
# steps and must still finish with --max-restarts KILLS, with final weights equal to an
# uninterrupted run's and a metrics log holding every step exactly once (the steps redone after
# each restart replace the ones logged after the checkpoint they resumed from).
#   tests/soak/kill_soak.sh [KILLS=20] [SEED=1]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kills=${1:-20}
seed=${2:-1}
bin=${LTRAIN_BIN:-$root/build/ltrain}
py=${LTRAIN_PYTHON:-$HOME/.cache/ltrain/venv/bin/python}
work=$(mktemp -d /tmp/ltrain-soak-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null || true' EXIT
RANDOM=$seed

printf 'name: soak\nseed: 11\n' >"$work/c.yaml"
args=(data.dataset=synthetic data.synthetic_shape=[1,12,12] data.synthetic_train_samples=32000
      data.synthetic_test_samples=256 data.batch_size=32 model.hidden=[256,128] model.dropout=0.1
      optimizer.name=adamw scheduler.name=cosine train.epochs=2 train.log_every=1
      train.checkpoint_every=25)

echo "soak: uninterrupted reference run"
"$bin" train "$work/c.yaml" "${args[@]}" --nproc-per-node 2 --output-dir "$work/ref" >/dev/null

last_step() {  # the newest train step in the run's metrics (0 when none yet)
  tail -n 3 "$work/soak/metrics.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | tail -1 |
    grep -o '[0-9]*$' || echo 0
}

echo "soak: $kills SIGKILLs of random workers at random steps"
"$bin" train "$work/c.yaml" "${args[@]}" --nproc-per-node 2 --max-restarts "$kills" \
  --output-dir "$work/soak" >"$work/soak.out" 2>"$work/soak.err" &
job=$!
done_kills=0
while [ "$done_kills" -lt "$kills" ] && kill -0 "$job" 2>/dev/null; do
  from=$(last_step)
  gap=$((5 + RANDOM % 60))  # kill after this many more steps
  while kill -0 "$job" 2>/dev/null && [ $(($(last_step) - from)) -lt "$gap" ]; do sleep 0.02; done
  workers=($(pgrep -P "$job" || true))
  [ ${#workers[@]} -eq 2 ] || { sleep 0.1; continue; }
  victim=${workers[$((RANDOM % 2))]}
  at=$(last_step)
  kill -9 "$victim" 2>/dev/null || continue
  done_kills=$((done_kills + 1))
  echo "  kill $done_kills: pid $victim after step $at"
  # Wait for the restart: new workers, then progress past the resumed checkpoint.
  while kill -0 "$job" 2>/dev/null && pgrep -P "$job" | grep -qx "$victim"; do sleep 0.02; done
done
status=0
wait "$job" || status=$?
echo "soak: job exit code $status after $done_kills kills; restarts: $(grep -c 'restarting all workers' "$work/soak.err")"

"$py" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def steps(run):
    return [json.loads(l)["step"] for l in open(f"{work}/{run}/metrics.jsonl") if '"train"' in l]
ref, soak = steps("ref"), steps("soak")
same_weights = open(f"{work}/ref/model.safetensors", "rb").read() == open(f"{work}/soak/model.safetensors", "rb").read()
print(f"soak: steps logged {len(soak)} (reference {len(ref)}); every step once: {soak == list(range(1, len(ref) + 1))}")
print(f"soak: final weights equal to the uninterrupted run's: {same_weights}")
summary = json.load(open(f"{work}/soak/summary.json"))
print(f"soak: status {summary['status']}, test_accuracy {summary['test_accuracy']:.4f}")
sys.exit(0 if same_weights and soak == ref and summary["status"] == "completed" else 1)
PY
echo "soak: PASS ($work)"
