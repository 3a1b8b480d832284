#!/usr/bin/env bash
# Memory per rank under dist.zero 0, 1, 2 and 3, for 1, 2 and 4 processes: a GPT of 3.2M
# parameters (12.4 MiB of fp32 parameters; AdamW: two moments each, 25 MiB) trained 10 steps on
# the CPU. Reads parameter_mb, gradient_mb, optimizer_state_mb (the largest rank's, after the last
# step), gathered_peak_mb (ZeRO-3: the most gathered parameters alive at once) and peak_rss_mb from
# summary.json. Then a GPT of 604M parameters (LAYERS=48 blocks of 1024) on 4 ranks under
# ZeRO-3: each rank's peak RSS in each phase (build, first step, save, resume, init_from, export)
# from LTRAIN_MEMORY_LOG, less the same binary's in the same phase on a tiny model, against P,
# (P+G+O)/W and the gathered units;
# and the same under a per-process memory cap below P (prlimit --data, RLIMIT_DATA: the memory a
# process writes, not the libraries it maps), where ZeRO-3 trains, resumes and exports and DDP
# cannot build the model.
#   bench/zero_memory.sh [LTRAIN_BIN]     prints markdown tables
#   SKIP_SMALL=1 bench/zero_memory.sh     only the large model's part
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=/usr/share/games/fortunes/cookie
# Freed blocks of 128 KiB and more go back to the system at once (glibc's default threshold grows
# with the blocks freed, so the memory a sharded run frees would stay in the heap): both sides.
export MALLOC_MMAP_THRESHOLD_=131072
field() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s.get(sys.argv[2], 0))" "$1" "$2"; }
if [ -z "${SKIP_SMALL:-}" ]; then
echo "| processes | dist.zero | parameters | gradients | optimizer state | P+G+O | target (P+G+O)/W + gathered | gathered peak | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for procs in 1 2 4; do
  for zero in 0 1 2 3; do
    [ "$procs" -eq 1 ] && [ "$zero" -ge 1 ] && continue  # one process has nothing to shard with
    run=$tmp/p$procs-z$zero
    "$bin" train "$root/configs/gpt_char.yaml" --nproc-per-node "$procs" model.n_layer=4 model.n_embd=256 \
      model.n_head=4 data.path=$text train.max_steps=10 train.threads=1 dist.zero=$zero \
      --output-dir "$run" >/dev/null 2>&1
    p=$(field "$run/summary.json" parameter_mb); g=$(field "$run/summary.json" gradient_mb)
    o=$(field "$run/summary.json" optimizer_state_mb); u=$(field "$run/summary.json" gathered_peak_mb)
    rss=$(field "$run/summary.json" peak_rss_mb)
    [ "$zero" -eq 0 ] && [ "$procs" -eq 1 ] && whole=$(python3 -c "print($p + $g + $o)")
    python3 -c "
p, g, o, u, w, procs, zero, rss = $p, $g, $o, $u, $whole, $procs, $zero, $rss
target = '%.1f MiB' % (w / procs + u) if zero == 3 else '-'
print('| %d | %d | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %s | %s | %.0f MiB |' % (
    procs, zero, p, g, o, p + g + o, target, '%.1f MiB' % u if zero == 3 else '-', rss))"
  done
done
fi

# ---- A GPT of LAYERS blocks of 1024 (48: 604M parameters, tied head), 4 processes, plain SGD (no
# optimizer state: O = 0, so (P+G+O)/W = P/2 per rank). Each phase's peak RSS per rank, less
# the same phase's on a tiny GPT of the same binary (LibTorch, threads, data: the baseline).
head -c 40000 /usr/share/games/fortunes/cookie >"$tmp/t.txt"
echo "seed: 1" >"$tmp/c.yaml"
common=(data.dataset=text data.path=$tmp/t.txt data.tokenizer=char data.val_fraction=0.05
  data.batch_size=1 data.eval_batch_size=2 model.name=gpt model.block_size=64 model.dropout=0
  optimizer.name=sgd optimizer.lr=0.01 optimizer.momentum=0 optimizer.weight_decay=0
  scheduler.name=constant train.threads=1 train.log_every=1 train.eval_every=0
  train.checkpoint_every=2 train.epochs=1 dist.zero=3)
big=(model.n_layer=${LAYERS:-48} model.n_embd=1024 model.n_head=16)
tiny=(model.n_layer=1 model.n_embd=32 model.n_head=2)
export MALLOC_MMAP_THRESHOLD_=131072
# One model's phases: 2 steps (build, first step, save), 1 more resumed (resume, save), an
# export of the sharded checkpoint, and a fresh run from that export (init_from).
phases() {  # NAME, then the model's keys; env CAP_MB: RLIMIT_DATA of every process
  local name=$1; shift
  local log=$tmp/$name.jsonl run=$tmp/$name
  local limit=(); [ -n "${CAP_MB:-}" ] && limit=(prlimit --data=$((CAP_MB * 1024 * 1024)))
  : >"$log"
  export LTRAIN_MEMORY_LOG=$log
  "${limit[@]}" "$bin" train "$tmp/c.yaml" --nproc-per-node 4 "${common[@]}" "$@" train.max_steps=2 \
    --output-dir "$run" >"$run.1.log" 2>&1 || { echo "$name: train failed: $(grep -m1 error "$run.1.log")"; return 1; }
  "${limit[@]}" "$bin" train "$tmp/c.yaml" --nproc-per-node 4 "${common[@]}" "$@" train.max_steps=3 \
    train.resume=$run/checkpoints/step-00000002.shards --output-dir "$run-resumed" >"$run.2.log" 2>&1 || { echo "$name: resume failed: $(grep -m1 error "$run.2.log")"; return 1; }
  RANK=0 "${limit[@]}" "$bin" export --run "$run" --checkpoint "$run/checkpoints/step-00000002.shards" \
    --hf "$tmp/$name-hf" >"$run.3.log" 2>&1 || { echo "$name: export failed: $(grep -m1 error "$run.3.log")"; return 1; }
  "${limit[@]}" "$bin" train "$tmp/c.yaml" --nproc-per-node 4 "${common[@]}" "$@" train.max_steps=1 \
    model.init_from=$tmp/$name-hf --output-dir "$run-init" >"$run.4.log" 2>&1 ||
    { echo "$name: init_from failed: $(grep -m1 error "$run.4.log")"; return 1; }
  unset LTRAIN_MEMORY_LOG
}
phases tiny "${tiny[@]}"
phases big "${big[@]}"
params=$(grep -o 'gpt with [0-9]* parameters' "$tmp/big.1.log" | grep -o '[0-9]*' | head -1)
python3 - "$tmp" "$params" <<'PY'
import json, sys, collections
tmp, params = sys.argv[1], int(sys.argv[2])
def peaks(name):  # phase -> the largest rank's peak RSS (MiB), over every run it happened in
    out = collections.defaultdict(float)
    for line in open(f"{tmp}/{name}.jsonl"):
        r = json.loads(line)
        out[r["phase"]] = max(out[r["phase"]], r["peak_rss_mb"])
    return out
base, big = peaks("tiny"), peaks("big")
s = json.load(open(f"{tmp}/big/summary.json"))
P = params * 4 / 2**20  # fp32 parameters, MiB
print(f"\nGPT of {params / 1e6:.0f}M parameters (P = {P:.0f} MiB fp32), 4 processes, ZeRO-3, SGD: (P+G+O)/W = "
      f"{2 * P / 4:.0f} MiB; summary.json after the last step: parameters "
      f"{s.get('parameter_mb', 0):.0f}, gradients {s.get('gradient_mb', 0):.0f}, optimizer state "
      f"{s.get('optimizer_state_mb', 0):.0f}, gathered peak {s.get('gathered_peak_mb', 0):.0f} "
      f"MiB, peak RSS {s.get('peak_rss_mb', 0):.0f} MiB\n")
print("| phase | peak RSS, largest rank | tiny model's | difference | of P |")
print("| --- | --- | --- | --- | --- |")
for ph in ["build", "first step", "save", "resume", "init_from", "export"]:
    if ph in big:
        d = big[ph] - base.get(ph, 0)
        print(f"| {ph} | {big[ph]:.0f} MiB | {base.get(ph, 0):.0f} MiB | {d:.0f} MiB | {d / P:.2f} |")
PY

# ---- The same under a cap of CAP_MB per process (default 90% of P): ZeRO-3 trains, resumes,
# exports and starts from init_from; DDP (dist.zero 0) cannot build the model; a cap too small
# for the shard names the phase.
pmib=$((params * 4 / 1048576))
cap=${CAP_MB:-$((pmib * 9 / 10))}
echo
echo "Under \`prlimit --data\` of $cap MiB per process (P = $pmib MiB of fp32 parameters):"
echo
if CAP_MB=$cap phases capped "${big[@]}"; then
  echo "- ZeRO-3: trained, resumed, exported and started from the export under the cap;" \
    "loss at step 3: $(grep -o 'loss [0-9.]*' "$tmp/capped.2.log" | tail -1)"
fi
set +e
prlimit --data=$((cap * 1024 * 1024)) "$bin" train "$tmp/c.yaml" --nproc-per-node 4 "${common[@]}" "${big[@]}" \
  dist.zero=0 train.max_steps=1 --output-dir "$tmp/ddp" >"$tmp/ddp.log" 2>&1
echo "- DDP: exit $?: $(grep -m1 'error' "$tmp/ddp.log" | cut -c1-240)"
small=${SMALL_CAP_MB:-400}
prlimit --data=$((small * 1024 * 1024)) "$bin" train "$tmp/c.yaml" --nproc-per-node 4 "${common[@]}" "${big[@]}" \
  train.max_steps=1 --output-dir "$tmp/small" >"$tmp/small.log" 2>&1
echo "- ZeRO-3 under $small MiB: exit $?: $(grep -m1 'error' "$tmp/small.log" | cut -c1-240)"
