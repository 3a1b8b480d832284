#!/usr/bin/env bash
# Installs what is missing, builds, and trains: scripts/train.sh [CONFIG] [KEY=VALUE ...] [ltrain flags]
# Default CONFIG: configs/quickstart.yaml on Fashion-MNIST, as 2 processes (DDP over Gloo) unless
# --nproc-per-node is given. Each run gets a fresh directory under runs/ unless --output-dir is given.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Only what training needs: no test tools, no test binaries (scripts/test.sh adds them).
"$root/scripts/setup.sh" --train
# The build's progress shows: a first build takes minutes (an up-to-date one is a line).
"$root/scripts/build.sh" ltrain ltrain_cuda
config=configs/quickstart.yaml
if [ $# -gt 0 ] && [[ "$1" != *=* ]] && [[ "$1" != -* ]]; then config=$1; shift; fi
cd "$root"
extra=()
if [[ " $* " != *" --output-dir "* ]]; then
  stem=$(basename "$config" .yaml)
  extra=(--output-dir "runs/$stem-$(date +%Y%m%d-%H%M%S)")
fi
[[ " $* " == *" --nproc-per-node "* ]] || extra+=(--nproc-per-node 2)
exec "$root/build/ltrain" train "$config" "$@" "${extra[@]}"
