#!/usr/bin/env bash
# Memory per rank under dist.zero 0, 1, 2 and 3, for 1, 2 and 4 processes: a GPT of 3.2M
# parameters (12.4 MiB of fp32 parameters; AdamW: two moments each, 25 MiB) trained 10 steps on
# the CPU. Reads parameter_mb, gradient_mb, optimizer_state_mb (the largest rank's, after the last
# step), gathered_peak_mb (ZeRO-3: the most gathered parameters alive at once) and peak_rss_mb from
# summary.json. Then the memory-cap case: a 25M-parameter GPT on 4 ranks, each process limited to
# CAP_KB of address space (prlimit --as), under DDP and under ZeRO-3.
#   bench/zero_memory.sh [LTRAIN_BIN]     prints markdown tables
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

# The memory cap: 25.2M parameters (96.5 MiB fp32; AdamW's P+G+O 386 MiB per rank under DDP).
cap_kb=${CAP_KB:-3360000}
echo
echo "25.2M-parameter GPT (n_layer 8, n_embd 512), 4 processes, each limited to $cap_kb kB of address space:"
echo
echo "| dist.zero | exit | P+G+O per rank | gathered peak | peak RSS | last line |"
echo "| --- | --- | --- | --- | --- | --- |"
for zero in 0 3; do
  run=$tmp/cap-z$zero
  set +e
  prlimit --as=$((cap_kb * 1024)) "$bin" train "$root/configs/gpt_char.yaml" --nproc-per-node 4 \
    model.n_layer=8 model.n_embd=512 model.n_head=8 model.block_size=64 data.batch_size=4 \
    data.eval_batch_size=4 train.max_steps=6 train.threads=1 train.log_every=3 dist.zero=$zero \
    --output-dir "$run" >"$run.log" 2>&1
  rc=$?
  set -e
  last=$(grep -v '^\s*$' "$run.log" | grep -E 'error|test_accuracy' | head -1 | cut -c1-110 | tr '|' '/')
  if [ -f "$run/summary.json" ] && [ "$rc" -eq 0 ]; then
    python3 -c "
import json; s = json.load(open('$run/summary.json'))
t = s['parameter_mb'] + s['gradient_mb'] + s['optimizer_state_mb']
print('| $zero | $rc | %.1f MiB | %.1f MiB | %.0f MiB | $last |' % (t, s.get('gathered_peak_mb', 0), s['peak_rss_mb']))"
  else
    echo "| $zero | $rc | - | - | - | $last |"
  fi
done
