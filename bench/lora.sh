#!/usr/bin/env bash
# LoRA against full fine-tuning of the same model, and ltrain against PEFT + PyTorch eager
# (bench/reference/train_ref.py, transformers' LlamaForCausalLM with peft.get_peft_model) on the
# same LoRA run: a llama of 4 blocks of 512 (~13 M parameters; vocabulary 2048, fortunes BPE
# shards), 1 process, batch 8 x 256 tokens, AdamW, 40 steps. Reads trainable parameters (the
# run's LoRA line; all of them for full), optimizer state and gradients (summary.json), peak RSS
# and tokens/s (samples/s x block) from each side's summary.json.
#   bench/lora.sh [LTRAIN_BIN]    prints a markdown table
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/ltrain}
py=${PYTHON:-$HOME/.cache/ltrain/venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$root/scripts/prepare_tokens.py" /usr/share/games/fortunes/* --out "$tmp/tokens" \
  --vocab-size 2048 >/dev/null 2>&1
common=(data.path=$tmp/tokens data.batch_size=8 model.n_layer=4 model.n_embd=512 model.n_head=8
  model.n_kv_head=4 model.intermediate_size=1376 model.block_size=256 model.tie_weights=false
  model.vocab_size=2048 optimizer.lr=0.0005 optimizer.weight_decay=0 scheduler.warmup_steps=5
  train.max_steps=40 train.log_every=10 train.eval_every=0 train.checkpoint_every=0
  train.threads=2)
lora=(finetune.method=lora lora.rank=16 lora.alpha=32 lora.target_modules=all-linear)
field() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s.get(sys.argv[2], 0))" "$1" "$2"; }
echo "| run | trainable parameters | optimizer state | gradients | peak RSS | tokens/s |"
echo "| --- | --- | --- | --- | --- | --- |"
for side in ltrain pytorch; do
  for method in full lora; do
    run=$tmp/$side-$method
    extra=()
    [ "$method" = lora ] && extra=("${lora[@]}")
    if [ "$side" = ltrain ]; then
      "$bin" train "$root/configs/llama_tokens.yaml" "${common[@]}" "${extra[@]}" \
        --output-dir "$run" >"$run.log" 2>&1
      trainable=$(grep -o "[0-9]* of [0-9]* parameters train" "$run.log" | cut -d' ' -f1 || true)
      [ -n "$trainable" ] || trainable=$(grep -o "with [0-9]* parameters" "$run.log" | head -1 | cut -d' ' -f2)
    else
      OMP_NUM_THREADS=2 "$py" "$root/bench/reference/train_ref.py" "$root/configs/llama_tokens.yaml" \
        "${common[@]}" "${extra[@]}" --ltrain "$bin" --out "$run" >"$run.log" 2>&1
      trainable=$(grep -o "trainable [0-9]*" "$run.log" | cut -d' ' -f2)
    fi
    python3 -c "
import json
s = json.load(open('$run/summary.json'))
def mb(k): return '%.1f MiB' % s[k] if k in s else '-'
print('| %s %s | %s | %s | %s | %.0f MiB | %.0f |' % ('$side', '$method', '{:,}'.format(int('$trainable')),
      mb('optimizer_state_mb'), mb('gradient_mb'), s['peak_rss_mb'], s['samples_per_s'] * 256))"
  done
done

# The frozen base held in bf16 (lora.base_dtype), against fp32, on the same LoRA run: the
# parameters' bytes, peak RSS and tokens/s, in fp32 (each product upcasts the weight) and under
# train.precision bf16 (autocast rounds either to bf16).
echo
echo "| ltrain lora | precision | parameters | peak RSS | tokens/s | final loss |"
echo "| --- | --- | --- | --- | --- | --- |"
for precision in fp32 bf16; do
  for base in fp32 bf16; do
    run=$tmp/base-$base-$precision
    "$bin" train "$root/configs/llama_tokens.yaml" "${common[@]}" "${lora[@]}" \
      lora.base_dtype=$base train.precision=$precision --output-dir "$run" >"$run.log" 2>&1
    python3 -c "
import json
s = json.load(open('$run/summary.json'))
print('| base %s | %s | %.1f MiB | %.0f MiB | %.0f | %.4f |' % ('$base', '$precision',
      s['parameter_mb'], s['peak_rss_mb'], s['samples_per_s'] * 256, s['train_loss']))"
  done
done
