#!/usr/bin/env bash
# The one prepared script for a CUDA machine (one H200, torch in its python3, cmake, ninja and the
# CUDA toolkit, no internet, none of our other dependencies): everything a CPU cannot show, in one
# device call (under 600 s).
#   here:           scripts/fetch_gpu_debs.sh   (the Debian packages the build needs, and
#                   Fashion-MNIST's, into .debs/)
#   on the device:  scripts/gpu_check.sh        (with .debs carried; results under $OUT)
#   here, no GPU:   scripts/gpu_check.sh --dry-run   (the same steps, environment included, on
#                   this machine's build and CPU, benchmarks at tiny sizes: the script itself is
#                   checked)
# Steps, all under one deadline (GPU_CHECK_BUDGET_S, 540 s by default, counted from the start;
# 840 s in a dry run):
#   1. preflight: nvcc, the carried packages (Fashion-MNIST among them), torch seeing the GPU;
#   2. build only what the check runs (ltrain, libltrain_cuda.so, ltrain_gpu_tests, ddp_worker);
#   3. the CUDA tests with the GPU visible and LTRAIN_EXPECT_CUDA=1 (a case that cannot see the
#      GPU fails instead of skipping): NCCL, bf16, the fp16 scaler, pinned batches, resume bytes,
#      no host sync, ZeRO-1/2/3 on one GPU, activation checkpointing with dropout, KV-cache
#      generation, the image loader, init_from;
#   4. the same binary with the GPU hidden and LTRAIN_EXPECT_CUDA unset: the CPU paths of that
#      machine, and every [cuda] case skipping (had the variable leaked, they would fail);
#   5. the benchmarks: CNN, MLP and ResNet-18 at bf16 against the Python reference (images/s),
#      a GPT at bf16 against Python eager (tokens/s and MFU).
# $OUT gets three files: RESULTS-gpu.md (one row per step, written as each ends, so a stop leaves
# what was done), gpu_check.log, and logs.tar.gz (every log). It ends with the table, or with the
# first failure named.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-$root/gpu-results}
logs=$(mktemp -d /tmp/ltrain-gpu-logs.XXXXXX)
mkdir -p "$out"
start=$(date +%s)
# A dry run shares CI's 2 cores with the rest of its tests: three times the time for each step,
# within its CTest limit (900 s).
scale=$([ $dry -eq 1 ] && echo 3 || echo 1)
budget=${GPU_CHECK_BUDGET_S:-$([ $dry -eq 1 ] && echo 840 || echo 540)}
table="$out/RESULTS-gpu.md"
log() { printf '[gpu_check %3ds] %s\n' $(($(date +%s) - start)) "$*" | tee -a "$out/gpu_check.log"; }
pack() { tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null; }
row() { echo "| $1 | $2 |" >>"$table"; }
fail() {
  log "FAILED: $*"
  row "stopped" "FAILED: $*"
  pack
  exit 1
}
# Seconds left before the deadline, less what the steps after this one need at least.
left() { echo $((budget - ($(date +%s) - start) - ${1:-0})); }
# limit NEED_AFTER CAP: a step's time limit, at most CAP, leaving NEED_AFTER for what follows;
# fails the check naming the step when not even 20 s are left for it.
limit() {
  local l
  local cap=$(($2 * scale))
  l=$(left $(($1 * scale)))
  [ "$l" -gt "$cap" ] && l=$cap
  echo "$l"
}
need() { [ "$2" -ge 20 ] || fail "out of time before $1 ($(left) s of ${budget} s left)"; }
: >"$out/gpu_check.log"
printf '| check | result |\n| --- | --- |\n' >"$table"

# 1. Preflight: what the build and the runs need, each missing thing named before any work.
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] || fail "no nvcc (the CUDA toolkit): LibTorch's CMake files need it; put it on PATH or in /usr/local/cuda"
export PATH="$(dirname "$nvcc"):$PATH"
if [ $dry -eq 1 ]; then
  PY=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
  build=${LTRAIN_BUILD_DIR:-$root/build}
  machine="dry run on $(nproc) CPU cores (no GPU)"
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
  build="$root/build-gpu"
  machine=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed -n 1p)
fi
# Fashion-MNIST (the quickstart's and the benchmarks' data): Debian's package here, unpacked
# from .debs/ on the GPU machine.
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ -z "${LTRAIN_FASHION_MNIST_DIR:-}" ]; then
  export LTRAIN_FASHION_MNIST_DIR=${prefix:-/nonexistent}/usr/share/datasets/fashion-mnist
fi
fmnist=${LTRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$fmnist/train-images-idx3-ubyte.gz" ] ||
  fail "Fashion-MNIST not found in $fmnist (scripts/fetch_gpu_debs.sh downloads dataset-fashion-mnist into .debs/)"
log "machine: $machine; torch $("$PY" -c 'import torch; print(torch.__version__)'); nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
row "machine" "$machine, torch $("$PY" -c 'import torch; print(torch.__version__)')"

# 2. Build only what the check runs.
targets=(ltrain ltrain_cuda ltrain_gpu_tests ddp_worker)
l=$(limit 200 400)
need build "$l"
if [ ! -f "$build/build.ninja" ]; then
  if [ $dry -eq 1 ]; then
    "$root/scripts/build.sh" >"$logs/build.log" 2>&1 || { pack; fail "build (see build.log in logs.tar.gz)"; }
  else
    torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    timeout "$l" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DLTRAIN_PYTHON="$PY" \
      -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include" -Wno-dev >"$logs/configure.log" 2>&1 ||
      { tail -30 "$logs/configure.log"; fail "configure (see configure.log in logs.tar.gz)"; }
  fi
fi
l=$(limit 200 400)
need build "$l"
# (A second call resumes an unfinished build where the first left it.)
timeout "$l" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >>"$logs/build.log" 2>&1
rc=$?
[ $rc -eq 124 ] && fail "build unfinished after ${l} s: call again on the warm machine, the build resumes"
[ $rc -eq 0 ] || { grep -m20 -A5 error "$logs/build.log"; fail "build (see build.log in logs.tar.gz)"; }
version=$("$build/ltrain" --version 2>&1)
echo "$version" >"$logs/version.txt"
cuda_line=$(echo "$version" | grep '^CUDA:')
log "built; $cuda_line"
row "build ($(IFS=,; echo "${targets[*]}"))" "done at $(($(date +%s) - start)) s"
row "CUDA plugin and NCCL (ltrain --version)" "$cuda_line"
if [ $dry -eq 0 ]; then
  case "$cuda_line" in *"loaded, NCCL"*) ;; *) fail "libltrain_cuda.so did not load on the GPU machine: $cuda_line" ;; esac
fi

# 3. The CUDA tests, GPU visible. LTRAIN_EXPECT_CUDA=1 for this step alone.
l=$(limit 160 240)
need "the CUDA tests" "$l"
LTRAIN_EXPECT_CUDA=1 timeout "$l" "$build/tests/ltrain_gpu_tests" "[cuda]" >"$logs/cuda_tests.log" 2>&1
cuda_rc=$?
cuda_cases=$("$build/tests/ltrain_gpu_tests" "[cuda]" --list-test-names-only 2>/dev/null | grep -c .)
if [ $dry -eq 1 ]; then
  # No GPU here: every case must fail on the variable, which proves it reaches the tests.
  expected_fails=$(grep -c "LTRAIN_EXPECT_CUDA=1 but LibTorch sees no GPU" "$logs/cuda_tests.log")
  cuda_summary="dry run: all $cuda_cases case(s) refused for want of a GPU, as LTRAIN_EXPECT_CUDA=1 asks"
  [ "$cuda_cases" -gt 0 ] && [ "$expected_fails" -eq "$cuda_cases" ] ||
    fail "dry run: $expected_fails of $cuda_cases [cuda] case(s) saw LTRAIN_EXPECT_CUDA=1 (see cuda_tests.log)"
else
  cuda_summary=$(grep -E '^(All tests passed|test cases:)' "$logs/cuda_tests.log" | tail -1)
  [ $cuda_rc -eq 124 ] && fail "CUDA tests out of time after ${l} s (see cuda_tests.log)"
  [ $cuda_rc -eq 0 ] || { grep -B3 -A12 FAILED "$logs/cuda_tests.log" | head -60; fail "CUDA tests: $cuda_summary (see cuda_tests.log)"; }
fi
log "CUDA tests: $cuda_summary"
row "CUDA tests ([cuda], $cuda_cases cases, GPU visible)" "$cuda_summary"

# 4. The same binary with the GPU hidden and LTRAIN_EXPECT_CUDA unset: the CPU paths there, and
# the [cuda] cases skipping.
l=$(limit 130 150)
need "the GPU-hidden tests" "$l"
env -u LTRAIN_EXPECT_CUDA CUDA_VISIBLE_DEVICES="" timeout "$l" "$build/tests/ltrain_gpu_tests" \
  >"$logs/hidden_tests.log" 2>&1
hidden_rc=$?
hidden_summary=$(grep -E '^(All tests passed|test cases:)' "$logs/hidden_tests.log" | tail -1)
[ $hidden_rc -eq 124 ] && fail "GPU-hidden tests out of time after ${l} s (see hidden_tests.log)"
[ $hidden_rc -eq 0 ] || { grep -B3 -A12 FAILED "$logs/hidden_tests.log" | head -40; fail "GPU-hidden tests: $hidden_summary (see hidden_tests.log)"; }
log "GPU hidden: $hidden_summary"
row "the same tests with the GPU hidden ([cuda] skip, CPU paths run)" "$hidden_summary"

# 5. The benchmarks: images/s against the Python reference, then the GPT at bf16 with its MFU.
bench_args=(--gpu --repeats 2)
gpt_args=()
[ $dry -eq 1 ] && bench_args+=(--quick --repeats 1) && gpt_args+=(--tiny --steps 6 --log-every 2)
l=$(limit 70 200)
need "the image benchmark" "$l"
LTRAIN_BIN="$build/ltrain" timeout "$l" "$PY" "$root/bench/run.py" "${bench_args[@]}" >"$logs/gpu_bench.md" 2>"$logs/gpu_bench.log"
rc=$?
[ $rc -eq 124 ] && fail "GPU benchmark out of time after ${l} s (see gpu_bench.log)"
[ $rc -eq 0 ] || { tail -20 "$logs/gpu_bench.log"; fail "GPU benchmark (see gpu_bench.log)"; }
log "GPU benchmark done"
l=$(limit 0 150)
need "the GPT benchmark" "$l"
timeout "$l" "$PY" "$root/bench/gpt_bench.py" --ltrain "$build/ltrain" --out "$(mktemp -d /tmp/ltrain-gpt-bench.XXXXXX)" "${gpt_args[@]}" \
  >"$logs/gpt_bench.md" 2>"$logs/gpt_bench.log"
rc=$?
[ $rc -eq 124 ] && fail "GPT benchmark out of time after ${l} s (see gpt_bench.log)"
[ $rc -eq 0 ] || { tail -20 "$logs/gpt_bench.log"; fail "GPT benchmark (see gpt_bench.log)"; }
log "GPT benchmark done"
row "wall time" "$(($(date +%s) - start)) s of ${budget} s"
{
  echo
  cat "$logs/gpu_bench.md"
  echo
  cat "$logs/gpt_bench.md"
} >>"$table"
pack
cat "$table"
