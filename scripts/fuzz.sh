#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs each on a copy of
# its seed corpus (tests/fuzz/corpus/<target>) for an equal share of SECONDS.
#   scripts/fuzz.sh 70            # all seven targets, 10 s each
#   scripts/fuzz.sh 600 config    # one target
#   scripts/fuzz.sh --build-only  # builds them, runs none (scripts/test.sh, before the tests start)
# A crash leaves its input in build-fuzz/crashes/<target>/ and the script exits 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:?usage: scripts/fuzz.sh SECONDS|--build-only [TARGET...]}
shift
build_only=0
[ "$seconds" = "--build-only" ] && build_only=1
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config idx checkpoint safetensors text tokens images)
LTRAIN_HOME=${LTRAIN_HOME:-$HOME/.cache/ltrain}
PY=$LTRAIN_HOME/venv/bin/python
build=${LTRAIN_FUZZ_BUILD_DIR:-$root/build-fuzz}
"$root/scripts/setup.sh"

export CCACHE_BASEDIR=$root
export CCACHE_DIR=${CCACHE_DIR:-$LTRAIN_HOME/ccache}
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
if [ ! -f "$build/build.ninja" ]; then
  prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cmake -S "$root" -B "$build" -G Ninja -DLTRAIN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_PREFIX_PATH="$prefix" -DLTRAIN_PYTHON="$PY" -DBUILD_TESTING=OFF \
    -Wno-dev >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "${LTRAIN_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"
[ "$build_only" -eq 1 ] && exit 0

# libtorch is not built with ASan: its own allocator pairs and one-definition duplicates are not
# ours to report. Leak checks stay on for the targets that do not load torch.
export ASAN_OPTIONS=alloc_dealloc_mismatch=0:detect_odr_violation=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
per=$(( seconds / ${#targets[@]} ))
[ "$per" -lt 1 ] && per=1
status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t crashes=$build/crashes/$t
  rm -rf "$corpus"
  mkdir -p "$corpus" "$crashes"
  cp "$root/tests/fuzz/corpus/$t"/* "$corpus"/
  leaks=1
  case "$t" in checkpoint | safetensors) leaks=0 ;; esac
  echo "fuzz_$t: ${per}s from $(ls "$corpus" | wc -l) seeds"
  if ! "$build/fuzz_$t" "$corpus" -max_total_time="$per" -max_len=65536 -rss_limit_mb=4096 \
      -detect_leaks=$leaks -artifact_prefix="$crashes/" -print_final_stats=1 \
      >"$build/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t FAILED: $(grep -m1 -E 'ERROR|runtime error|deadly|uncaught' "$build/fuzz_$t.log")"
    echo "  log: $build/fuzz_$t.log; input: $(ls -t "$crashes" | head -1)"
    status=1
  else
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$build/fuzz_$t.log" | sed "s/^/  /" || true
  fi
done
exit $status
