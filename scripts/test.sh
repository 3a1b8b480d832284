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
cd "${LTRAIN_BUILD_DIR:-$root/build}"
args=(--output-on-failure -j "${LTRAIN_TEST_JOBS:-2}")
[ "$quick" -eq 1 ] && args+=(-LE slow)
ctest "${args[@]}"
