#!/usr/bin/env bash
# Installs everything ltrain needs to build, train and test: Debian packages and a Python
# virtual environment holding the pinned torch wheel (LibTorch with c10d, Gloo and NCCL).
# Idempotent: a second run checks stamps and returns in seconds.
set -euo pipefail

LTRAIN_HOME=${LTRAIN_HOME:-$HOME/.cache/ltrain}
VENV=$LTRAIN_HOME/venv
here=$(cd "$(dirname "$0")" && pwd)
REQS=$here/requirements.txt

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config zlib1g-dev
  libcli11-dev libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 libgloo-dev nlohmann-json3-dev
  libpcre2-dev  # the Unicode regex of byte-level BPE tokenizers (ltrain generate's prompts)
  libturbojpeg0-dev libpng-dev  # JPEG and PNG image files (data/image_decode.cpp)
  dataset-fashion-mnist fortunes  # quickstart data; the text corpus of configs/gpt_char.yaml
  clang libclang-rt-14-dev iproute2  # fuzzing (libFuzzer), multi-node tests (ip netns)
  clang-format  # scripts/check_format.sh (a test): every C++ file as .clang-format writes it
  slurmctld slurmd slurm-client munge  # the test that runs a real single-node Slurm
)

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
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  did=1
fi

# The venv lives outside the clone so CI's fresh clone reuses it; the stamp records which
# requirements it was built from, so a changed pin reinstalls and an unchanged one is skipped.
stamp=$VENV/.ltrain-requirements
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQS" "$stamp"; then
  log "preparing Python environment in $VENV"
  mkdir -p "$LTRAIN_HOME"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQS"
  cp "$REQS" "$stamp"
  did=1
fi

if [ "$did" -eq 0 ]; then
  log "nothing to do (Debian packages and $VENV are up to date)"
fi
