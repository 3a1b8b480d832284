#!/usr/bin/env bash
# The prepared script for a CUDA machine (one H200, torch in its python3, cmake, ninja and the CUDA
# toolkit, no internet, none of our other dependencies), in two device calls by design:
#   here:           scripts/fetch_gpu_debs.sh           (the Debian packages the build needs, and
#                                                        Fashion-MNIST's, into .debs/)
#   device call 1:  scripts/gpu_check.sh --part build-test   (carry .debs; timeout_s 600)
#   device call 2:  scripts/gpu_check.sh --part bench        (carry .debs; timeout_s 600)
#   here, no GPU:   scripts/gpu_check.sh --dry-run [--part P] (the same steps and the same configure
#                   path, on this machine's CPU, benchmarks at tiny sizes: the script is checked)
# bench/RESULTS.md ("GPU check: how to run it") has the exact calls.
#
# Part build-test (deadline GPU_CHECK_BUDGET_S, 420 s by default):
#   1. preflight: nvcc, the carried packages unpacked into a prefix, torch seeing the GPU;
#   2. configure a clean build tree against that prefix, the system's packages hidden from CMake;
#   3. build only what the check runs (ltrain, libltrain_cuda.so, ltrain_gpu_tests, ddp_worker),
#      its own time in the table;
#   4. the CUDA tests with LTRAIN_EXPECT_CUDA=1 (a case that cannot see the GPU fails);
#   5. two ranks sharing the GPU over Gloo (DDP, ZeRO-3, tp 2 on CUDA tensors): NCCL refuses two
#      ranks on one device, so this is what one GPU can show of the multi-rank code;
#   6. the same binary with the GPU hidden: the CPU paths of that machine, every [cuda] case
#      skipping.
# Part bench (deadline 300 s): the bf16 matmul ceiling, the image benchmarks (samples/s, MFU),
# the GPT-2 124M and llama benchmarks against PyTorch eager (tokens/s, MFU, peak memory).
#
# A step that passed is recorded in the build tree (<build>/gpu-check-steps/) and skipped on a
# rerun, its row repeated: a call cut short by its deadline is simply called again on the warm
# machine, and the build resumes where it stopped. --fresh forgets the recorded steps.
# $OUT gets RESULTS-gpu-<part>.md (one row per step, written as each ends, so a stop leaves what
# was done), gpu_check.log and logs-<part>.tar.gz. It ends with the table, or the failure named.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() {
  echo "usage: scripts/gpu_check.sh [--dry-run] [--fresh] [--build-only] --part build-test|bench" >&2
  exit 2
}
dry=0 fresh=0 build_only=0 part=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --fresh) fresh=1 ;;
    --build-only) build_only=1 part=build-test ;;
    --part) [ $# -ge 2 ] || usage; part=$2; shift ;;
    --part=*) part=${1#--part=} ;;
    *) usage ;;
  esac
  shift
done
case "$part" in
  build-test | bench) ;;
  "") echo "gpu_check: name the part: --part build-test (first call) or --part bench (second)" >&2; exit 2 ;;
  *) echo "gpu_check: --part is build-test or bench, not '$part'" >&2; exit 2 ;;
esac

out=${OUT:-$root/gpu-results}
logs=$(mktemp -d /tmp/ltrain-gpu-logs.XXXXXX)
mkdir -p "$out"
start=$(date +%s)
# A dry run shares CI's 2 cores with the rest of its tests: three times the time for each step.
scale=$([ $dry -eq 1 ] && echo 3 || echo 1)
default_budget=$([ "$part" = build-test ] && echo 420 || echo 300)
[ $build_only -eq 1 ] && default_budget=1200  # scripts/test.sh's prebuild: a cold build of ~115 compiles here
budget=${GPU_CHECK_BUDGET_S:-$((default_budget * scale))}
table="$out/RESULTS-gpu-$part.md"
log() { printf '[gpu_check %s %3ds] %s\n' "$part" $(($(date +%s) - start)) "$*" | tee -a "$out/gpu_check.log"; }
pack() { tar -czf "$out/logs-$part.tar.gz" -C "$logs" . 2>/dev/null; }
row() { echo "| $1 | $2 |" >>"$table"; }
fail() {
  log "FAILED: $*"
  row "stopped" "FAILED: $*"
  pack
  exit 1
}
# Seconds left before the deadline, less what the steps after this one need at least.
left() { echo $((budget - ($(date +%s) - start) - ${1:-0})); }
# limit NEED_AFTER CAP: a step's time limit, at most CAP, leaving NEED_AFTER for what follows.
limit() {
  local l cap=$(($2 * scale))
  l=$(left $(($1 * scale)))
  [ "$l" -gt "$cap" ] && l=$cap
  echo "$l"
}
need() { [ "$2" -ge 20 ] || fail "out of time before $1 ($(left) s of ${budget} s left): call the same part again, passed steps are skipped"; }
touch "$out/gpu_check.log"
printf '| check | result |\n| --- | --- |\n' >"$table"

# 1. Preflight: what the build and the runs need, each missing thing named before any work.
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] || fail "no nvcc (the CUDA toolkit): LibTorch's CMake files need it; put it on PATH or in /usr/local/cuda"
export PATH="$(dirname "$nvcc"):$PATH"
debs=${LTRAIN_GPU_DEBS:-$root/.debs}
if [ $dry -eq 1 ] && ! ls "$debs"/*.deb >/dev/null 2>&1; then
  log "dry run: fetching the packages a GPU machine is carried (scripts/fetch_gpu_debs.sh)"
  "$root/scripts/fetch_gpu_debs.sh" >"$logs/fetch_debs.log" 2>&1 || fail "scripts/fetch_gpu_debs.sh (see fetch_debs.log)"
fi
ls "$debs"/*.deb >/dev/null 2>&1 || fail "no $debs/*.deb: run scripts/fetch_gpu_debs.sh here and carry .debs"
# The packages unpacked into a prefix of their own, as on the GPU machine, also in a dry run: the
# configure and link paths a GPU machine takes are the ones checked here.
prefix=/tmp/ltrain-deps
rm -rf "$prefix" && mkdir -p "$prefix"
for d in "$debs"/*.deb; do
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$d" "$prefix"; else (cd "$prefix" && ar p "$d" data.tar.xz | tar -xJ); fi
done
# Links a package makes absolute (zlib1g-dev's libz.so -> /lib/.../libz.so.1.2.13) point into the
# prefix, where the carried runtime package put the file, not at a system that may lack it.
while IFS= read -r link; do
  target=$(readlink "$link")
  case "$target" in /*) [ -e "$prefix$target" ] && ln -sfn "$prefix$target" "$link" ;; esac
done < <(find "$prefix" -type l)
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $dry -eq 1 ]; then
  PY=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
  build=${LTRAIN_GPU_BUILD_DIR:-${LTRAIN_BUILD_DIR:-$root/build}/gpu-dry}
  machine="dry run on $(nproc) CPU cores (no GPU)"
else
  PY=${PYTHON:-$(command -v python3)}
  "$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch: set PYTHON to the python that has it"
  "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || fail "torch sees no GPU"
  build=${LTRAIN_GPU_BUILD_DIR:-$root/build-gpu}
  machine=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed -n 1p)
fi
# Fashion-MNIST (the image benchmarks' data): Debian's package here, from .debs/ there.
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ -z "${LTRAIN_FASHION_MNIST_DIR:-}" ]; then
  export LTRAIN_FASHION_MNIST_DIR=$prefix/usr/share/datasets/fashion-mnist
fi
fmnist=${LTRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$fmnist/train-images-idx3-ubyte.gz" ] ||
  fail "Fashion-MNIST not found in $fmnist (scripts/fetch_gpu_debs.sh downloads dataset-fashion-mnist into .debs/)"
steps="$build/gpu-check-steps"
[ $fresh -eq 1 ] && rm -rf "$steps"
# --build-only (scripts/test.sh's prebuild) brings the tree up to the sources each time: ninja
# compiles only what changed.
[ $build_only -eq 1 ] && rm -f "$steps/build"
mkdir -p "$steps"
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
log "machine: $machine; torch $torch_version; nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
row "machine" "$machine, torch $torch_version"

# A step recorded as passed by an earlier call: its rows again, and nothing run.
done_before() {
  [ -f "$steps/$1" ] || return 1
  sed 's/ |$/ (passed in an earlier call) |/' "$steps/$1" >>"$table"
  log "$1: passed in an earlier call, skipped"
}
# passed STEP ROW...: the step's rows into the table and into the record.
passed() {
  local s=$1
  shift
  : >"$steps/$s.tmp"
  for r in "$@"; do echo "$r" >>"$steps/$s.tmp"; echo "$r" >>"$table"; done
  mv "$steps/$s.tmp" "$steps/$s"
}
targets=(ltrain ltrain_cuda ltrain_gpu_tests ddp_worker)

build_and_test() {
  # 2. Configure a clean tree against the unpacked prefix. CMake searches the prefix and never the
  # system's /usr (nor /, whose lib/ is /usr/lib under a merged /usr), so a package missing from
  # .debs/ fails here as it would on the GPU machine.
  if [ ! -f "$build/build.ninja" ]; then
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
    local torch_prefix launcher=()
    torch_prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    # The dry run caches its compiles (the GPU machine has no ccache; each of its builds is cold).
    if [ $dry -eq 1 ] && command -v ccache >/dev/null; then
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
      export CCACHE_BASEDIR=$root CCACHE_DIR=${CCACHE_DIR:-${LTRAIN_HOME:-$HOME/.cache/ltrain}/ccache}
      export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    fi
    local l
    l=$(limit 200 120)
    need configure "$l"
    mkdir -p "$build"
    timeout "$l" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCMAKE_IGNORE_PREFIX_PATH="/usr;/" \
      -DCMAKE_SYSTEM_IGNORE_PREFIX_PATH="/usr;/" -DLTRAIN_PYTHON="$PY" \
      -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include" "${launcher[@]}" -Wno-dev \
      >"$logs/configure.log" 2>&1 ||
      { tail -30 "$logs/configure.log"; fail "configure (see configure.log in logs-$part.tar.gz)"; }
    # Every dependency CMake found is the prefix's: a path into /usr would not exist there.
    local leaked
    leaked=$(grep -E '^(CLI11|yaml-cpp|spdlog|fmt|nlohmann_json|Catch2|ZLIB|PNG|PCRE2|TURBOJPEG)[A-Za-z_]*:[A-Z]+=/(usr|lib)/' \
      "$build/CMakeCache.txt" || true)
    [ -z "$leaked" ] || fail "configure found system files the GPU machine lacks: $(echo "$leaked" | tr '\n' ' ')"
    log "configured $build against $prefix"
  fi

  # 3. Build only what the check runs; its own time in the table.
  if ! done_before build; then
    local l t0 rc
    # --build-only (scripts/test.sh's prebuild) has nothing after the build to leave time for.
    if [ $build_only -eq 1 ]; then l=$(left); else l=$(limit 150 420); fi
    need build "$l"
    t0=$(date +%s)
    # Every tenth of ninja's [done/total] lines shows, so a cold build is seen to progress.
    # (A shell loop: Debian's awk reads a pipe in blocks and would print them all at the end.)
    timeout "$l" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" 2>&1 |
      while IFS= read -r line; do
        echo "$line" >>"$logs/build.log"
        case "$line" in "["*/*"]"*) n=$((${n:-0} + 1)) && [ $((n % 10)) -eq 0 ] && echo "  build ${line%% *}" ;; esac
      done
    rc=${PIPESTATUS[0]}
    [ $rc -eq 124 ] && fail "build unfinished after ${l} s: call --part build-test again on the warm machine, the build resumes"
    [ $rc -eq 0 ] || { grep -m20 -A5 error "$logs/build.log"; fail "build (see build.log in logs-$part.tar.gz)"; }
    local compiles version cuda_line
    compiles=$(grep -c 'Building CXX object' "$logs/build.log")
    version=$("$build/ltrain" --version 2>&1)
    cuda_line=$(echo "$version" | grep '^CUDA:')
    if [ $dry -eq 0 ]; then
      case "$cuda_line" in *"loaded, NCCL"*) ;; *) fail "libltrain_cuda.so did not load on the GPU machine: $cuda_line" ;; esac
    fi
    log "built in $(($(date +%s) - t0)) s ($compiles compiles); $cuda_line"
    passed build "| build ($(IFS=,; echo "${targets[*]}")) | $(($(date +%s) - t0)) s on $(nproc) cores, $compiles compiles |" \
      "| CUDA plugin and NCCL (ltrain --version) | $cuda_line |"
  fi
  [ $build_only -eq 1 ] && { pack; cat "$table"; return 0; }

  # 4. The CUDA tests, GPU visible. LTRAIN_EXPECT_CUDA=1 for this step alone.
  if ! done_before cuda-tests; then
    cuda_step "cuda-tests" "[cuda]~[gloo-gpu]" "CUDA tests" 140 240
  fi
  # 5. Several ranks on one GPU: NCCL refuses it; Gloo carries CUDA tensors between them.
  if ! done_before gloo-gpu; then
    cuda_step "gloo-gpu" "[gloo-gpu]" "two ranks on one GPU over Gloo (DDP, ZeRO-3, tp 2)" 100 150
  fi
  # 6. The same binary with the GPU hidden and LTRAIN_EXPECT_CUDA unset.
  if ! done_before hidden-tests; then
    local l rc summary
    l=$(limit 0 150)
    need "the GPU-hidden tests" "$l"
    env -u LTRAIN_EXPECT_CUDA CUDA_VISIBLE_DEVICES="" timeout "$l" "$build/tests/ltrain_gpu_tests" \
      >"$logs/hidden_tests.log" 2>&1
    rc=$?
    summary=$(grep -E '^(All tests passed|test cases:)' "$logs/hidden_tests.log" | tail -1)
    [ $rc -eq 124 ] && fail "GPU-hidden tests out of time after ${l} s (see hidden_tests.log)"
    [ $rc -eq 0 ] || { grep -B3 -A12 FAILED "$logs/hidden_tests.log" | head -40; fail "GPU-hidden tests: $summary (see hidden_tests.log)"; }
    log "GPU hidden: $summary"
    passed hidden-tests "| the same tests with the GPU hidden ([cuda] skip, CPU paths run) | $summary |"
  fi
  row "not run on one GPU" "NCCL between peers, ZeRO and tensor parallel over NCCL, pipelines across GPUs: NCCL refuses two ranks on one device (step 5 runs the multi-rank cases over Gloo on CUDA tensors instead)"
}

# cuda_step STEP SPEC TITLE NEED_AFTER CAP: Catch2 cases SPEC with LTRAIN_EXPECT_CUDA=1.
cuda_step() {
  local step=$1 spec=$2 title=$3 l rc cases summary
  l=$(limit "$4" "$5")
  need "$title" "$l"
  LTRAIN_EXPECT_CUDA=1 timeout "$l" "$build/tests/ltrain_gpu_tests" "$spec" >"$logs/$step.log" 2>&1
  rc=$?
  cases=$("$build/tests/ltrain_gpu_tests" "$spec" --list-test-names-only 2>/dev/null | grep -c .)
  if [ $dry -eq 1 ]; then
    # No GPU here: every case must fail on the variable, which proves it reaches the tests.
    local refused
    refused=$(grep -c "LTRAIN_EXPECT_CUDA=1 but LibTorch sees no GPU" "$logs/$step.log")
    summary="dry run: all $cases case(s) refused for want of a GPU, as LTRAIN_EXPECT_CUDA=1 asks"
    [ "$cases" -gt 0 ] && [ "$refused" -eq "$cases" ] ||
      fail "dry run: $refused of $cases case(s) of $spec saw LTRAIN_EXPECT_CUDA=1 (see $step.log)"
  else
    summary=$(grep -E '^(All tests passed|test cases:)' "$logs/$step.log" | tail -1)
    [ $rc -eq 124 ] && fail "$title out of time after ${l} s (see $step.log)"
    [ $rc -eq 0 ] || { grep -B3 -A12 FAILED "$logs/$step.log" | head -60; fail "$title: $summary (see $step.log)"; }
  fi
  log "$title: $summary"
  passed "$step" "| $title ($spec, $cases cases, GPU visible) | $summary |"
}

# bench_step STEP TITLE NEED_AFTER CAP ROW COMMAND...: a benchmark printing a markdown table, kept
# beside the step's record so that a rerun's table has it too.
bench_step() {
  local step=$1 title=$2 need_after=$3 cap=$4 row_title=$5 l rc
  shift 5
  done_before "$step" && return
  l=$(limit "$need_after" "$cap")
  need "$title" "$l"
  timeout "$l" "$@" >"$logs/$step.md" 2>"$logs/$step.log"
  rc=$?
  [ $rc -eq 124 ] && fail "$title out of time after ${l} s (see $step.log)"
  [ $rc -eq 0 ] || { tail -20 "$logs/$step.log"; fail "$title (see $step.log)"; }
  log "$title done"
  cp "$logs/$step.md" "$steps/$step.md"
  passed "$step" "| $row_title | done, table below |"
}

benches() {
  [ -x "$build/ltrain" ] && [ -f "$steps/build" ] ||
    fail "no build in $build: run --part build-test first"
  local bench_args=(--gpu --repeats 2) gpt_args=() l ceiling
  [ $dry -eq 1 ] && bench_args+=(--quick --repeats 1) && gpt_args+=(--tiny --steps 6 --log-every 2)
  # The dense bf16 ceiling measured on this device, beside the datasheet's 989 TFLOP/s (H100/H200
  # SXM): MFU against both.
  if ! done_before ceiling; then
    l=$(limit 200 60)
    need "the bf16 ceiling" "$l"
    timeout "$l" "$PY" "$root/bench/bf16_ceiling.py" $([ $dry -eq 1 ] && echo --size 512) >"$logs/ceiling.txt" 2>&1 ||
      { cat "$logs/ceiling.txt"; fail "bench/bf16_ceiling.py (see ceiling.txt)"; }
    ceiling=$(tail -1 "$logs/ceiling.txt")
    echo "$ceiling" >"$steps/ceiling.tflops"
    log "bf16 matmul ceiling: $ceiling TFLOP/s"
    passed ceiling "| dense bf16 matmul ceiling (bench/bf16_ceiling.py) | $ceiling TFLOP/s measured; 989 datasheet |"
  fi
  local peaks=(--peak-tflops "$(cat "$steps/ceiling.tflops")" --datasheet-tflops 989)
  bench_step image-bench "the image benchmark" 120 150 "image benchmarks (bench/run.py --gpu)" \
    env LTRAIN_BIN="$build/ltrain" "$PY" "$root/bench/run.py" "${bench_args[@]}" "${peaks[@]}"
  bench_step gpt-bench "the GPT benchmark" 0 200 "GPT-2 124M and llama (bench/gpt_bench.py)" \
    "$PY" "$root/bench/gpt_bench.py" --ltrain "$build/ltrain" \
    --out "$(mktemp -d /tmp/ltrain-gpt-bench.XXXXXX)" "${peaks[@]}" "${gpt_args[@]}"
  for t in image-bench gpt-bench; do { echo; cat "$steps/$t.md"; } >>"$table.tail"; done
}

if [ "$part" = build-test ]; then build_and_test; else benches; fi
[ $build_only -eq 1 ] && exit 0
row "wall time" "$(($(date +%s) - start)) s of ${budget} s"
[ -f "$table.tail" ] && { cat "$table.tail" >>"$table"; rm -f "$table.tail"; }
pack
cat "$table"
