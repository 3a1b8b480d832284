#!/usr/bin/env bash
# Installs everything ltrain needs to build, train and test: Debian packages and a Python
# virtual environment holding the pinned torch wheel (LibTorch with c10d, Gloo and NCCL).
# --train: only what training needs (scripts/train.sh), not the tests' tools (clang, Slurm).
# Idempotent: a second run checks stamps and returns in seconds.
set -euo pipefail

LTRAIN_HOME=${LTRAIN_HOME:-$HOME/.cache/ltrain}
VENV=$LTRAIN_HOME/venv
here=$(cd "$(dirname "$0")" && pwd)
REQS=$here/requirements.txt

# What training needs: the compiler and libraries ltrain builds against, the quickstart's data.
APT_TRAIN=(
  build-essential cmake ninja-build ccache pkg-config zlib1g-dev
  libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 libgloo-dev nlohmann-json3-dev
  libpcre2-dev  # the Unicode regex of byte-level BPE tokenizers (ltrain generate's prompts)
  libturbojpeg0-dev libpng-dev  # JPEG and PNG image files (data/image_decode.cpp)
  dataset-fashion-mnist fortunes  # quickstart data; the text corpus of configs/gpt_char.yaml
)
# What the tests need besides (scripts/test.sh; scripts/train.sh --train skips them).
APT_TEST=(
  clang libclang-rt-14-dev iproute2  # fuzzing (libFuzzer), multi-node tests (ip netns)
  clang-format  # scripts/check_format.sh (a test): every C++ file as .clang-format writes it
  chromium  # tests/integration/report_test.cpp opens report.html in a real (headless) browser
  slurmctld slurmd slurm-client munge  # the test that runs a real single-node Slurm
)
train_only=0
for a in "$@"; do
  case "$a" in
    --train) train_only=1 ;;
    *) echo "usage: scripts/setup.sh [--train]" >&2; exit 2 ;;
  esac
done
APT_PACKAGES=("${APT_TRAIN[@]}")
[ "$train_only" -eq 1 ] || APT_PACKAGES+=("${APT_TEST[@]}")

did=0
log() { printf 'setup: %s\n' "$*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # Its progress shows: a first install fetches a few hundred MB.
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  did=1
fi

# The venv lives outside the clone so CI's fresh clone reuses it; the stamp records which
# requirements it was built from, so a changed pin reinstalls and an unchanged one is skipped.
stamp=$VENV/.ltrain-requirements
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQS" "$stamp"; then
  log "preparing Python environment in $VENV (the first time about 5 GB: torch's CUDA build)"
  mkdir -p "$LTRAIN_HOME"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Not -q: each package shows as it is fetched (a bar on a terminal), so minutes are not silent.
  "$VENV/bin/python" -m pip install --progress-bar on -r "$REQS"
  cp "$REQS" "$stamp"
  did=1
fi

if [ "$did" -eq 0 ]; then
  log "nothing to do (Debian packages and $VENV are up to date)"
fi
