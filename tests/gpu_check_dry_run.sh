#!/usr/bin/env bash
# scripts/gpu_check.sh --dry-run as the GPU machine gets it, on this machine's CPU: part build-test
# from nothing recorded, part bench, then part build-test again, which must skip every step as
# passed in an earlier call (a call cut short by its deadline resumes that way) and be quick.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
: "${OUT:?set OUT to the folder for the tables}"
rm -rf "$OUT" && mkdir -p "$OUT"
check() { "$root/scripts/gpu_check.sh" --dry-run "$@" || { echo "FAILED: gpu_check.sh --dry-run $*"; exit 1; }; }
check --fresh --part build-test
check --part bench
t0=$(date +%s)
check --part build-test >"$OUT/rerun.txt"
took=$(($(date +%s) - t0))
cat "$OUT/rerun.txt"
skipped=$(grep -c '(passed in an earlier call) |$' "$OUT/RESULTS-gpu-build-test.md")
# build (2 rows), the CUDA tests, the Gloo ranks on one GPU, the GPU-hidden tests.
[ "$skipped" -eq 5 ] || { echo "FAILED: the rerun skipped $skipped of 5 rows"; exit 1; }
[ "$took" -lt 120 ] || { echo "FAILED: the rerun took $took s, though every step had passed"; exit 1; }
bench="$OUT/RESULTS-gpu-bench.md"
for want in '| wall time | ' 'TFLOP/s measured; 989 datasheet' 'MFU ltrain (measured / datasheet)' \
  '| gpt 2x32, ' 'MFU (measured / datasheet)'; do
  grep -qF "$want" "$bench" || { echo "FAILED: $bench lacks '$want'"; exit 1; }
done
echo "gpu_check.sh --dry-run: both parts ended with their tables; the rerun skipped all 5 rows in $took s"
