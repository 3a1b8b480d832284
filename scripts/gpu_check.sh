#!/usr/bin/env bash
# The one prepared script for a CUDA machine without internet (one H200, torch in its python3,
# cmake and ninja, none of our other dependencies). Run scripts/fetch_gpu_debs.sh here first, then
# on the device: scripts/gpu_check.sh  (with .debs carried). It unpacks the .deb files into a
# prefix, builds ltrain against that machine's torch, runs the CUDA tests ([cuda]: NCCL with one
# rank, DDP on CUDA, fp32 and bf16 training on the GPU) and the multi-process suite, and writes the
# logs and a results table to $OUT (or gpu-results/), then the GPU benchmark (bench/run.py --gpu:
# ltrain vs the Python reference, bf16, the CNN and the MLP at large batches) and the GPT benchmark
# (bench/gpt_bench.py: a 114M-parameter GPT at bf16, ltrain vs Python eager, dp vs ddp). Budget:
# under 10 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-results}
mkdir -p "$out"
prefix=/tmp/ltrain-deps
start=$(date +%s)
log() { printf '[gpu_check %3ds] %s\n' $(($(date +%s) - start)) "$*" | tee -a "$out/gpu_check.log"; }

ls "$root"/.debs/*.deb >/dev/null 2>&1 || { log "no .debs/: run scripts/fetch_gpu_debs.sh and carry .debs"; exit 2; }
rm -rf "$prefix" && mkdir -p "$prefix"
for d in "$root"/.debs/*.deb; do
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$d" "$prefix"; else (cd "$prefix" && ar p "$d" data.tar.xz | tar -xJ); fi
done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PYTHON:-$(command -v python3)}
"$PY" -c 'import torch' 2>/dev/null || { log "$PY has no torch: set PYTHON to the python that has it"; exit 2; }
torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
log "torch $("$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$out/gpu_check.log" 2>&1

build="$root/build-gpu"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DLTRAIN_PYTHON="$PY" \
  -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include" -Wno-dev >"$out/configure.log" 2>&1 || { log "configure failed"; tail -30 "$out/configure.log"; exit 1; }
log "configured"
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { log "build failed"; grep -m20 -A5 error "$out/build.log"; exit 1; }
log "built"

cd "$build"
timeout 240 ctest -R 'CUDA|GPU' --output-on-failure >"$out/cuda_tests.log" 2>&1
cuda_rc=$?
log "CUDA tests: rc=$cuda_rc $(grep -E 'tests passed' "$out/cuda_tests.log")"
timeout 240 ctest -L quick -j 8 --output-on-failure >"$out/quick_tests.log" 2>&1
quick_rc=$?
log "quick suite on the GPU machine: rc=$quick_rc $(grep -E 'tests passed' "$out/quick_tests.log")"

cd "$root"
LTRAIN_BIN="$build/ltrain" timeout 240 "$PY" bench/run.py --gpu --repeats 3 >"$out/gpu_bench.md" 2>"$out/gpu_bench.log"
bench_rc=$?
log "GPU benchmark: rc=$bench_rc"
cat "$out/gpu_bench.md"
# The GPT benchmark (issue 7): >= 100M parameters at bf16, ltrain vs Python eager, dp vs ddp.
timeout 180 "$PY" bench/gpt_bench.py --ltrain "$build/ltrain" --out /tmp/ltrain-gpt-bench \
  >"$out/gpt_bench.md" 2>"$out/gpt_bench.log"
gpt_rc=$?
log "GPT benchmark: rc=$gpt_rc"
cat "$out/gpt_bench.md"

{
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| machine | $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), torch $("$PY" -c 'import torch; print(torch.__version__)') |"
  echo "| CUDA tests (NCCL one rank, DDP on CUDA, fp32/bf16 training) | $(grep -E 'tests passed' "$out/cuda_tests.log") |"
  echo "| quick suite | $(grep -E 'tests passed' "$out/quick_tests.log") |"
  echo "| wall time | $(($(date +%s) - start)) s |"
  echo
  cat "$out/gpu_bench.md"
  echo
  cat "$out/gpt_bench.md"
} >"$out/RESULTS-gpu.md"
cat "$out/RESULTS-gpu.md"
[ $cuda_rc -eq 0 ] && [ $quick_rc -eq 0 ]
