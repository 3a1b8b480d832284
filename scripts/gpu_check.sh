#!/usr/bin/env bash
# The one prepared script for a CUDA machine (one H200, torch in its python3, cmake and ninja, no
# internet, none of our other dependencies): everything a CPU cannot show, in under 8 minutes.
#   here:           scripts/fetch_gpu_debs.sh   (the Debian packages the build needs, into .debs/)
#   on the device:  scripts/gpu_check.sh        (with .debs carried; results under $OUT)
#   here, no GPU:   scripts/gpu_check.sh --dry-run   (the same steps on this machine's build and
#                   the CPU, benchmarks at tiny sizes: the script itself is checked)
# Steps: build against that machine's torch; the CUDA tests (ltrain_tests "[cuda]": NCCL used,
# bf16 really bf16, the fp16 scaler skipping on inf, pinned batches, a killed dropout run
# resuming to the same bytes, no step synchronising the host, train.device cpu with two
# processes); the quick suite with the GPU hidden (the CPU paths of that machine); the benchmark
# (CNN, MLP and ResNet-18 at bf16 against the Python reference, images/s; a 114M-parameter GPT at
# bf16 against Python eager, tokens/s and MFU). One table: $OUT/RESULTS-gpu.md. It ends with
# that table, or with the first failure named.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-$root/gpu-results}
mkdir -p "$out"
start=$(date +%s)
log() { printf '[gpu_check %3ds] %s\n' $(($(date +%s) - start)) "$*" | tee -a "$out/gpu_check.log"; }
fail() { log "FAILED: $*"; exit 1; }
: >"$out/gpu_check.log"

if [ $dry -eq 1 ]; then
  PY=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
  "$root/scripts/build.sh" >"$out/build.log" 2>&1 || fail "build (see $out/build.log)"
  build=${LTRAIN_BUILD_DIR:-$root/build}
  jobs=2
  log "dry run on $(nproc) CPU cores, no GPU: CUDA tests skip, benchmarks at tiny sizes"
else
  prefix=/tmp/ltrain-deps
  ls "$root"/.debs/*.deb >/dev/null 2>&1 || fail "no .debs/: run scripts/fetch_gpu_debs.sh and carry .debs"
  rm -rf "$prefix" && mkdir -p "$prefix"
  for d in "$root"/.debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$d" "$prefix"; else (cd "$prefix" && ar p "$d" data.tar.xz | tar -xJ); fi
  done
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  PY=${PYTHON:-$(command -v python3)}
  "$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch: set PYTHON to the python that has it"
  "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || fail "torch sees no GPU"
  torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  log "torch $("$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$out/gpu_check.log" 2>&1
  build="$root/build-gpu"
  export LTRAIN_EXPECT_CUDA=1  # the [cuda] tests fail, not skip, if LibTorch sees no GPU here
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DLTRAIN_PYTHON="$PY" \
    -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include" -Wno-dev >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; fail "configure (see $out/configure.log)"; }
  cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 ||
    { grep -m20 -A5 error "$out/build.log"; fail "build (see $out/build.log)"; }
  jobs=8
fi
log "built"

# The CUDA checks, with the GPU visible.
timeout 300 "$build/tests/ltrain_tests" "[cuda]" >"$out/cuda_tests.log" 2>&1
cuda_rc=$?
cuda_summary=$(grep -E '^(All tests passed|test cases:)' "$out/cuda_tests.log" | tail -1)
log "CUDA tests: rc=$cuda_rc $cuda_summary"
[ $cuda_rc -eq 0 ] || { grep -B3 -A12 FAILED "$out/cuda_tests.log" | head -60; fail "CUDA tests (see $out/cuda_tests.log)"; }

# The CPU paths on that machine: every quick test with the GPU hidden (a dry run: a sample).
cd "$build"
# (Tests labelled hf need Python's transformers and tokenizers, which that python3 may lack.)
if [ $dry -eq 1 ]; then filter=(-R "train.device|bad input|GPU"); else filter=(-L quick -LE hf); fi
CUDA_VISIBLE_DEVICES="" timeout 300 ctest "${filter[@]}" -j "$jobs" --output-on-failure >"$out/quick_tests.log" 2>&1
quick_rc=$?
quick_summary=$(grep -E 'tests passed' "$out/quick_tests.log")
log "quick suite, GPU hidden: rc=$quick_rc $quick_summary"
[ $quick_rc -eq 0 ] || { grep -A3 'FAILED' "$out/quick_tests.log" | head -40; fail "quick suite (see $out/quick_tests.log)"; }
cd "$root"

# The benchmarks: images/s against the Python reference, then the GPT at bf16 with its MFU.
bench_args=(--gpu --repeats 2)
gpt_args=()
bench_limit=240
# (A dry run shares 2 cores with the rest of CI's tests: it gets more time.)
[ $dry -eq 1 ] && bench_args+=(--quick --repeats 1) && gpt_args+=(--tiny --steps 6 --log-every 2) && bench_limit=480
LTRAIN_BIN="$build/ltrain" timeout $bench_limit "$PY" bench/run.py "${bench_args[@]}" >"$out/gpu_bench.md" 2>"$out/gpu_bench.log" ||
  { tail -20 "$out/gpu_bench.log"; fail "GPU benchmark (see $out/gpu_bench.log)"; }
log "GPU benchmark done"
timeout 200 "$PY" bench/gpt_bench.py --ltrain "$build/ltrain" --out "$(mktemp -d /tmp/ltrain-gpt-bench.XXXXXX)" "${gpt_args[@]}" \
  >"$out/gpt_bench.md" 2>"$out/gpt_bench.log" || { tail -20 "$out/gpt_bench.log"; fail "GPT benchmark (see $out/gpt_bench.log)"; }
log "GPT benchmark done"

machine=$([ $dry -eq 1 ] && echo "dry run on $(nproc) CPU cores (no GPU)" ||
  nvidia-smi --query-gpu=name --format=csv,noheader | sed -n 1p)
{
  echo "| check | result |"
  echo "| --- | --- |"
  echo "| machine | $machine, torch $("$PY" -c 'import torch; print(torch.__version__)') |"
  echo "| CUDA tests ([cuda]: NCCL, bf16, fp16 skip, pinned, resume bytes, no host sync, train.device cpu) | $cuda_summary |"
  echo "| quick suite with the GPU hidden | $quick_summary |"
  echo "| wall time | $(($(date +%s) - start)) s |"
  echo
  cat "$out/gpu_bench.md"
  echo
  cat "$out/gpt_bench.md"
} >"$out/RESULTS-gpu.md"
cat "$out/RESULTS-gpu.md"
