#!/usr/bin/env bash
# Runs every shell block of README.md as a reader would after scripts/train.sh: each command as
# written, in a scratch directory laid out like the clone (build/, configs/ and scripts/ linked
# from it; runs/ and data/ fresh). Nothing else is skipped than what is named here, with why:
#   - the "Two commands" block: it is how this test is run (scripts/test.sh);
#   - `srun ... ...`: a placeholder for a Slurm cluster's command line (tests/slurm/ runs srun);
#   - the predict block: CONFIG, NAME and NEW are placeholders.
# One substitution: the fine-tuning block's HF_DIR (the reader's own model, which needs the
# network) is a small Qwen3 with a tokenizer.json, made here by transformers and tokenizers.
# A line that starts a server (tensorboard) passes when the server answers on its port.
# Every training run is cut to 30 steps (LTRAIN_TEST_OVERRIDES, a test hook of `ltrain train`):
# the commands, paths and flags are README's; the full lengths would take ten minutes here.
#   tests/readme/readme_commands_test.sh ROOT [BUILD_DIR]
set -euo pipefail
root=$(cd "$1" && pwd)
build=$(cd "${2:-$root/build}" && pwd)
py=${LTRAIN_HOME:-$HOME/.cache/ltrain}/venv/bin/python
work=$(mktemp -d /tmp/ltrain-readme.XXXXXX)
trap 'rm -rf "$work"' EXIT
ln -s "$build" "$work/build"
for d in configs scripts; do ln -s "$root/$d" "$work/$d"; done
cd "$work"
export LTRAIN_TEST_OVERRIDES="train.max_steps=30"

# The blocks, one file each, in README order.
awk -v dir="$work" '
  /^```(sh|bash)$/ { n++; f = sprintf("%s/block_%02d.sh", dir, n); inside = 1; next }
  /^```/ { inside = 0; next }
  inside { print > f }' "$root/README.md"

# The reader's own Hugging Face model, made here.
hf="$work/hf_qwen3"
"$py" "$root/tests/parity/hf_tools.py" make-qwen3 "$hf" --vocab 512 --positions 1024
"$py" "$root/tests/parity/hf_tools.py" make-tokenizer "$hf/tokenizer.json" llama3 512 \
  /usr/share/games/fortunes/fortunes

ran=0
for block in "$work"/block_*.sh; do
  if grep -q '^scripts/test.sh' "$block"; then
    echo "readme: skipping $(basename "$block"): the two set-up commands (this test runs under scripts/test.sh)"
    continue
  fi
  if grep -q 'predict CONFIG' "$block"; then
    echo "readme: skipping $(basename "$block"): CONFIG, NAME and NEW are placeholders"
    continue
  fi
  script="$work/run_$(basename "$block")"
  {
    echo "set -euo pipefail"
    while IFS= read -r line; do
      case "$line" in
        srun\ *) echo "# not run here (a Slurm cluster's command line): $line" ;;
        HF_DIR=*) echo "HF_DIR=$hf   # README: ${line#HF_DIR=}" ;;
        *"tensorboard --logdir"*)
          # A server: started, asked for its page, then stopped.
          echo "setsid bash -c '$line' > tensorboard.log 2>&1 & tb=\$!"
          echo "for i in \$(seq 60); do python3 -c 'import urllib.request as u; u.urlopen(\"http://localhost:6006\", timeout=2)' 2>/dev/null && break; sleep 1; done"
          echo "python3 -c 'import urllib.request as u; u.urlopen(\"http://localhost:6006\", timeout=2)' || { cat tensorboard.log; exit 1; }"
          echo "kill -- -\$tb" ;;
        *) echo "$line" ;;
      esac
    done < "$block"
  } > "$script"
  echo "readme: running $(basename "$block"):"
  sed 's/^/    /' "$block"
  start=$(date +%s)
  if ! bash -x "$script" > "$work/out.log" 2>&1; then
    echo "readme: FAILED: a command of $(basename "$block") as README writes it:"
    tail -40 "$work/out.log"
    exit 1
  fi
  echo "readme: $(basename "$block") passed in $(($(date +%s) - start)) s"
  ran=$((ran + 1))
done
[ "$ran" -ge 5 ] || { echo "readme: only $ran blocks ran; README has fewer blocks than expected"; exit 1; }
echo "readme: $ran blocks ran as written"
