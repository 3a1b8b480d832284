#!/usr/bin/env bash
# ltrain vs the Python reference, side by side: bench/run.sh [--repeats N] [--cases 0,1,...]
# Prints a Markdown table (see bench/run.py for what each column means).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" >/dev/null
"$root/scripts/build.sh" >/dev/null
exec "${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python" "$root/bench/run.py" "$@"
