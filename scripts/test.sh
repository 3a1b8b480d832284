#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
#   scripts/test.sh           all tests
#   scripts/test.sh --quick   skips the tests labelled slow
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${LTRAIN_BUILD_DIR:-$root/build}
if [ "$quick" -eq 0 ]; then
  # The fuzz targets (clang, ASan) compile the readers again: built here, before the tests start,
  # so their slow test only runs them and no compile races the other tests for its time limit.
  echo "test: building the libFuzzer targets into $build/fuzz"
  LTRAIN_FUZZ_BUILD_DIR=$build/fuzz "$root/scripts/fuzz.sh" --build-only
  # So is the GPU check's own tree, configured against the packages a GPU machine is carried
  # (scripts/gpu_check.sh --dry-run; ccache makes a rebuild cheap, the first one is a full build).
  echo "test: building the GPU check's tree into $build/gpu-dry (as the GPU machine configures it)"
  LTRAIN_BUILD_DIR=$build OUT=$build/gpu-dry-prebuild "$root/scripts/gpu_check.sh" --dry-run --build-only ||
    { cat "$build/gpu-dry-prebuild/gpu_check.log"; exit 1; }
fi
cd "$build"
args=(--output-on-failure -j "${LTRAIN_TEST_JOBS:-2}")
[ "$quick" -eq 1 ] && args+=(-LE slow)
ctest "${args[@]}"
