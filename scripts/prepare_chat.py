#!/usr/bin/env python3
"""Instruction, chat and preference JSONL -> token examples with a loss mask, for `data.dataset:
chat` (supervised fine-tuning) or `data.dataset: preference` (finetune.method dpo).

Each line is one example, in one of three shapes:
    {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
    {"prompt": "...", "completion": "..."}
    {"instruction": "...", "input": "..." (optional), "output": "..."}        (alpaca's)
The last two become a user message and the assistant's answer. Each conversation is rendered and
tokenised by the model's own tokenizer and chat template, exactly as transformers'
`apply_chat_template` renders it, and the loss mask marks the tokens of the assistant's turns
(`--train-on all`: every token): a turn's tokens are those the conversation up to and including it
adds to the conversation up to it with the generation prompt.

Preference pairs, for DPO, are tokenised as TRL's DPOTrainer tokenises them:
    {"prompt": [messages], "chosen": [messages], "rejected": [messages]}    (conversational)
    {"chosen": [messages], "rejected": [messages]}     (the prompt is the messages they share)
    {"prompt": "...", "chosen": "...", "rejected": "..."}     (plain text, each answer ending in
                                                               the tokenizer's eos_token)
Each answer's sequence is the prompt's tokens and the answer's; the mask marks the answer's (from
where the tokenised prompt and prompt + answer first differ). The files hold the sequences in pairs,
chosen then rejected. A file is all examples or all pairs.

Writes DIR/train.safetensors and DIR/val.safetensors (tokens int32, mask uint8, offsets int64: the
examples' starts and the end),
DIR/tokenizer.json (which ltrain copies into each run for `ltrain generate`) and
DIR/chat_template.jinja: ltrain checks both against model.init_from's.

    scripts/prepare_chat.py chats.jsonl --model HF_DIR --out data/chats
"""
import argparse
import json
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

OURS = re.compile(r"(train|val)\.safetensors|tokenizer\.json|chat_template\.jinja")


def fail(msg):
    sys.exit(f"prepare_chat: error: {msg}")


def check_out(out, overwrite):
    """--out must be new or empty; with --overwrite it may hold what this script wrote. Anything
    else there is the user's: refused, never touched."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        fail(f"--out '{out}' exists and is not a directory")
    entries = sorted(os.listdir(out))
    foreign = [e for e in entries if not OURS.fullmatch(e)]
    if foreign:
        fail(f"--out '{out}' holds files this script did not write ('{foreign[0]}'); choose a new or "
             f"empty directory")
    if entries and not overwrite:
        fail(f"--out '{out}' holds examples already; pass --overwrite to replace them")


def messages_of(record, where):
    if not isinstance(record, dict):
        fail(f"{where}: expected a JSON object, got {type(record).__name__}")
    if "messages" in record:
        msgs = record["messages"]
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            fail(f"{where}: 'messages' must be a list of {{\"role\": ..., \"content\": ...}} objects")
        return msgs
    if "prompt" in record and "completion" in record:
        return [{"role": "user", "content": str(record["prompt"])},
                {"role": "assistant", "content": str(record["completion"])}]
    if "instruction" in record and "output" in record:
        text = str(record["instruction"])
        if record.get("input"):
            text += "\n\n" + str(record["input"])
        return [{"role": "user", "content": text}, {"role": "assistant", "content": str(record["output"])}]
    fail(f"{where}: expected \"messages\", \"prompt\" and \"completion\", or \"instruction\" and "
         f"\"output\"; got keys {sorted(record)}")


def render(tok, msgs, generation_prompt=False):
    return list(tok.apply_chat_template(msgs, tokenize=True, return_dict=False,
                                        add_generation_prompt=generation_prompt))


def encode(tok, msgs, train_on, where):
    """The conversation's tokens and its mask (1: a token the loss learns)."""
    ids = render(tok, msgs)
    if train_on == "all":
        return ids, [1] * len(ids)
    mask = [0] * len(ids)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        start = len(render(tok, msgs[:i], generation_prompt=True)) if i else 0
        upto = render(tok, msgs[:i + 1])
        if ids[:len(upto)] != upto or start > len(upto):
            fail(f"{where}: the chat template renders turn {i + 1} differently inside the whole "
                 f"conversation than on its own; its tokens cannot be masked (use --train-on all)")
        for j in range(start, len(upto)):
            mask[j] = 1
    return ids, mask


def is_preference(record):
    return isinstance(record, dict) and "chosen" in record and "rejected" in record


def messages_list(value, where, key):
    if not isinstance(value, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value):
        fail(f"{where}: '{key}' must be a list of {{\"role\": ..., \"content\": ...}} objects, or "
             f"every field text")
    return value


def common_prefix_length(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def encode_pair(tok, record, where):
    """A preference record -> [(chosen ids, mask), (rejected ids, mask)], as TRL's DPOTrainer
    tokenises it: the answer starts where the tokenised prompt and prompt + answer first differ."""
    chosen, rejected = record["chosen"], record["rejected"]
    prompt = record.get("prompt")
    if isinstance(chosen, list) or isinstance(rejected, list) or isinstance(prompt, list):
        chosen = messages_list(chosen, where, "chosen")
        rejected = messages_list(rejected, where, "rejected")
        if prompt is None:  # implicit: the prompt is the messages both conversations open with
            n = 0
            while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
                n += 1
            prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
        prompt = messages_list(prompt, where, "prompt")
        if not prompt:
            fail(f"{where}: no prompt: 'chosen' and 'rejected' share no opening message")
        prompt_ids = render(tok, prompt, generation_prompt=True)
        answers = [render(tok, prompt + a) for a in (chosen, rejected)]
    else:
        if not all(isinstance(v, str) for v in (prompt, chosen, rejected)):
            fail(f"{where}: a text pair needs 'prompt', 'chosen' and 'rejected' as text")
        if not tok.eos_token:
            fail(f"{where}: the tokenizer has no eos_token to end the text answers with")
        answers = []
        for a in (chosen, rejected):
            a = a if a.endswith(tok.eos_token) else a + tok.eos_token
            answers.append(list(tok(text=prompt + a)["input_ids"]))
        prompt_ids = list(tok(text=prompt)["input_ids"])
    start = min(common_prefix_length(prompt_ids, ids) for ids in answers)
    out = []
    for ids, name in zip(answers, ("chosen", "rejected")):
        if len(ids) <= max(start, 1):
            fail(f"{where}: the {name} answer adds no token to the prompt")
        out.append((ids, [0] * start + [1] * (len(ids) - start)))
    return out


def write(path, examples, meta):
    import torch
    from safetensors.torch import save_file
    tokens = [t for ids, _ in examples for t in ids]
    mask = [m for _, ms in examples for m in ms]
    offsets = [0]
    for ids, _ in examples:
        offsets.append(offsets[-1] + len(ids))
    tmp = path + ".tmp"
    save_file({"tokens": torch.tensor(tokens, dtype=torch.int32),
               "mask": torch.tensor(mask, dtype=torch.uint8),
               "offsets": torch.tensor(offsets, dtype=torch.int64)}, tmp, metadata=meta)
    os.replace(tmp, path)  # a reader never sees half a file


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="JSONL files, one example a line")
    ap.add_argument("--model", required=True,
                    help="the Hugging Face model directory whose tokenizer and chat template to use")
    ap.add_argument("--out", required=True, help="directory for the examples and tokenizer.json")
    ap.add_argument("--val-fraction", type=float, default=0.05,
                    help="share of the examples, from the end, for validation (at least one)")
    ap.add_argument("--max-length", type=int, default=0,
                    help="drop examples of more tokens than this, and say how many (0: keep all)")
    ap.add_argument("--train-on", choices=["assistant", "all"], default="assistant",
                    help="which tokens the loss learns: the assistant's turns, or every token")
    ap.add_argument("--overwrite", action="store_true", help="replace this script's earlier output")
    args = ap.parse_args()
    check_out(args.out, args.overwrite)
    tok_file = os.path.join(args.model, "tokenizer.json")
    if not os.path.isfile(tok_file):
        fail(f"--model '{args.model}' has no tokenizer.json")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    if not tok.chat_template:
        fail(f"--model '{args.model}': the tokenizer has no chat template (tokenizer_config.json's "
             f"chat_template or chat_template.jinja); ltrain renders conversations only with the "
             f"model's own")

    examples, dropped, pairs = [], 0, None  # examples: each a list of (ids, mask), two for a pair
    for path in args.jsonl:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{n}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    fail(f"{where}: not JSON ({e.msg})")
                pair = is_preference(record)
                if pairs is None:
                    pairs = pair
                elif pair != pairs:
                    fail(f"{where}: a {'preference pair' if pair else 'chat example'} among "
                         f"{'pairs' if pairs else 'chat examples'}; a file is all one or the other")
                if pair:
                    seqs = encode_pair(tok, record, where)
                else:
                    seqs = [encode(tok, messages_of(record, where), args.train_on, where)]
                    if not any(seqs[0][1][1:]):
                        fail(f"{where}: the loss mask leaves no token to learn from (no assistant "
                             f"turn after the first token)")
                if args.max_length and max(len(ids) for ids, _ in seqs) > args.max_length:
                    dropped += 1
                    continue
                examples.append(seqs)
    if len(examples) < 2:
        fail(f"{len(examples)} example(s) in {args.jsonl}; need at least 2 (one for validation)")
    n_val = max(1, int(len(examples) * args.val_fraction))
    meta = ({"format": "ltrain-preference"} if pairs else
            {"format": "ltrain-chat", "train_on": args.train_on})
    os.makedirs(args.out, exist_ok=True)
    flat = lambda group: [seq for seqs in group for seq in seqs]  # a pair: chosen, then rejected
    write(os.path.join(args.out, "train.safetensors"), flat(examples[:-n_val]), meta)
    write(os.path.join(args.out, "val.safetensors"), flat(examples[-n_val:]), meta)
    with open(tok_file, "rb") as src, open(os.path.join(args.out, "tokenizer.json"), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(args.out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(tok.chat_template)  # ltrain checks it against model.init_from's
    learned = sum(sum(m[1:]) for _, m in flat(examples))
    total = sum(len(ids) for ids, _ in flat(examples))
    kind = "pairs" if pairs else "examples"
    print(f"wrote {args.out}: {len(examples) - n_val} training and {n_val} validation {kind}, "
          f"{total} tokens of which {learned} are learned"
          + (f"; {dropped} longer than --max-length {args.max_length} dropped" if dropped else ""),
          file=sys.stderr)


if __name__ == "__main__":
    main()
