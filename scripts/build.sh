#!/usr/bin/env bash
# Configures (once) and builds ltrain and its tests with CMake + Ninja into build/ (Release).
#   scripts/build.sh [TARGET...]   only these targets (scripts/train.sh: ltrain and its CUDA plugin)
# ccache keeps CI's fresh-clone rebuilds cheap; the base directory makes its hits path-independent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
LTRAIN_HOME=${LTRAIN_HOME:-$HOME/.cache/ltrain}
PY=$LTRAIN_HOME/venv/bin/python
build=${LTRAIN_BUILD_DIR:-$root/build}

export CCACHE_BASEDIR=$root
export CCACHE_DIR=${CCACHE_DIR:-$LTRAIN_HOME/ccache}
# Precompiled headers need these to be cacheable.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}

if [ ! -f "$build/build.ninja" ]; then
  echo "build: configuring $build (the first build compiles about 100 files against LibTorch:" \
    "several minutes on 2 cores; ninja shows [done/total] as it goes)"
  prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  mkdir -p "$build"
  # The log stays inside the build directory: a build never touches the checkout's files.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DLTRAIN_PYTHON="$PY" "${launcher[@]}" \
    -Wno-dev >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
# One compile at a time per core; LibTorch translation units take over 1 GiB each. Ninja prints
# one "[done/total] Building ..." line per finished step, so a long first build shows its progress.
targets=()
[ $# -gt 0 ] && targets=(--target "$@")
cmake --build "$build" -j "${LTRAIN_JOBS:-$(nproc)}" "${targets[@]}"
