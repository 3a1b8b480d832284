"""The oracle of ltrain's DPO: TRL's own DPOTrainer, on the same base, pairs and settings.

  dpo_reference.py BASE TRAIN.jsonl OUT_DIR --steps N --batch B --lr LR --beta BETA
                   [--clip C] [--adapter PEFT_DIR] [--pairs N]

Trains N steps in file order (a sequential sampler: ltrain's data.shuffle false), AdamW at a
constant rate, and writes OUT_DIR/log.json (per step: loss and TRL's rewards/* metrics) and
OUT_DIR/tokens.safetensors (TRL's tokenisation of the pairs in ltrain's layout: tokens, mask,
offsets; chosen then rejected), which ltrain's prepare_chat.py must reproduce; with --pairs N,
OUT_DIR/eval.json: TRL's evaluate() on the records after the first N.
"""
import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("jsonl")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--adapter", default="")
    ap.add_argument("--pairs", type=int, default=0, help="the first N records only (0: all)")
    args = ap.parse_args()

    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    with open(args.jsonl, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    held_out = records[args.pairs:] if args.pairs else []
    if args.pairs:
        records = records[:args.pairs]
    tok = AutoTokenizer.from_pretrained(args.base)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    if args.adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, args.adapter, is_trainable=True)

    class InOrder(DPOTrainer):  # ltrain's data.shuffle false: the pairs in file order
        def _get_train_sampler(self, *a, **k):
            return SequentialSampler(self.train_dataset)

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        cfg = DPOConfig(output_dir=scratch, per_device_train_batch_size=args.batch,
                        gradient_accumulation_steps=1, learning_rate=args.lr,
                        lr_scheduler_type="constant", warmup_steps=0, max_steps=args.steps,
                        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                        optim="adamw_torch", max_grad_norm=args.clip if args.clip > 0 else 1e9,
                        beta=args.beta, logging_steps=1, save_strategy="no", report_to=[],
                        use_cpu=True, seed=0, dataloader_num_workers=0, max_length=None,
                        disable_dropout=True, bf16=False, fp16=False)
        trainer = InOrder(model=model, args=cfg, train_dataset=Dataset.from_list(records),
                          eval_dataset=Dataset.from_list(held_out) if held_out else None,
                          processing_class=tok)
        ds = trainer.train_dataset
        tokens, mask, offsets = [], [], [0]
        for ex in ds:
            for answer in ("chosen_ids", "rejected_ids"):
                ids = list(ex["prompt_ids"]) + list(ex[answer])
                tokens += ids
                mask += [0] * len(ex["prompt_ids"]) + [1] * len(ex[answer])
                offsets.append(offsets[-1] + len(ids))
        save_file({"tokens": torch.tensor(tokens, dtype=torch.int32),
                   "mask": torch.tensor(mask, dtype=torch.uint8),
                   "offsets": torch.tensor(offsets, dtype=torch.int64)},
                  os.path.join(args.out, "tokens.safetensors"))
        trainer.train()
        if held_out:  # the pairs after --pairs, scored after training
            with open(os.path.join(args.out, "eval.json"), "w") as f:
                json.dump(trainer.evaluate(), f, indent=1)
    keys = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")
    log = [{"step": e["step"], **{k: e[k] for k in keys}} for e in trainer.state.log_history
           if "loss" in e and "rewards/chosen" in e]
    with open(os.path.join(args.out, "log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(f"dpo_reference: {len(log)} steps, loss {log[0]['loss']:.6f} -> {log[-1]['loss']:.6f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
