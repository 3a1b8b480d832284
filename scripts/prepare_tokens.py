#!/usr/bin/env python3
"""Text files -> llm.c token shards for `data.dataset: tokens`.

Trains a byte-level BPE tokenizer on the text with Hugging Face `tokenizers` (offline), or takes
an existing tokenizer.json, and writes DIR/train_000000.bin, ... and DIR/val_000000.bin in llm.c's
format (a header of 256 int32: magic 20240520 and uint16 tokens, or 20240801 and uint32 for a
vocabulary past 65536; version; token count) plus DIR/tokenizer.json, which ltrain copies into
each run directory so that `ltrain generate` decodes without the data.

    scripts/prepare_tokens.py /usr/share/games/fortunes/* --out data/fortunes --vocab-size 2048
"""
import argparse
import os
import re
import sys

import numpy as np

MAGIC_U16, MAGIC_U32 = 20240520, 20240801
VERSION_U16, VERSION_U32 = 1, 7  # llm.c's: GPT-2 shards and Llama 3 shards


def write_shard(path, tokens, vocab_size):
    wide = vocab_size > 65536
    header = np.zeros(256, dtype=np.int32)
    header[0] = MAGIC_U32 if wide else MAGIC_U16
    header[1] = VERSION_U32 if wide else VERSION_U16
    header[2] = len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint32 if wide else np.uint16).tobytes())
    os.replace(tmp, path)  # a reader never sees half a shard


def read_texts(paths):
    """The documents: each file split at fortune's '%' lines when it has them."""
    docs = []
    for p in paths:
        if os.path.isdir(p) or p.endswith(".dat") or p.endswith(".u8"):
            continue  # fortune's index files and directories
        with open(p, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        parts = [d.strip("\n") for d in text.split("\n%\n")] if "\n%\n" in text else [text]
        docs.extend(d for d in parts if d.strip())
    return docs


def train_tokenizer(docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


OURS = re.compile(r"(train|val)_\d{6}\.bin|tokenizer\.json")


def check_out(out, overwrite):
    """--out must be new or empty; with --overwrite it may hold what this script wrote, which goes
    (stale shards of a longer corpus would otherwise join the new ones' glob). Anything else there
    is the user's: refused, never touched."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        sys.exit(f"prepare_tokens: error: --out '{out}' exists and is not a directory")
    entries = sorted(os.listdir(out))
    foreign = [e for e in entries if not OURS.fullmatch(e)]
    if foreign:
        sys.exit(f"prepare_tokens: error: --out '{out}' holds files this script did not write "
                 f"('{foreign[0]}'); choose a new or empty directory")
    if entries and not overwrite:
        sys.exit(f"prepare_tokens: error: --out '{out}' holds shards already; pass --overwrite to "
                 f"replace them")
    for e in entries:
        if e != "tokenizer.json":
            os.remove(os.path.join(out, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("text", nargs="+", help="text files (directories and fortune .dat files are skipped)")
    ap.add_argument("--out", required=True, help="directory for the shards and tokenizer.json")
    ap.add_argument("--tokenizer", help="an existing tokenizer.json instead of training one")
    ap.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary to train")
    ap.add_argument("--val-fraction", type=float, default=0.05,
                    help="share of the documents, from the end, for validation")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard at most")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace the shards and tokenizer.json of an earlier run in --out")
    args = ap.parse_args()
    check_out(args.out, args.overwrite)

    from tokenizers import Tokenizer

    docs = read_texts(args.text)
    if len(docs) < 2:
        # One text (a book, a log): cut into paragraphs, or lines, so that validation gets some.
        for sep in ("\n\n", "\n"):
            docs = [p.strip("\n") for d in docs for p in d.split(sep) if p.strip()]
            if len(docs) >= 2:
                print(f"one document in {args.text}: cut into {len(docs)} at "
                      f"{'blank lines' if sep == chr(10) * 2 else 'line ends'}", file=sys.stderr)
                break
    if len(docs) < 2:
        sys.exit(f"prepare_tokens: error: {len(docs)} documents in {args.text}; need at least 2")
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(args.tokenizer) if args.tokenizer else train_tokenizer(docs, args.vocab_size)
    eot = tok.token_to_id("<|endoftext|>")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    n_val = max(1, int(len(docs) * args.val_fraction))
    splits = {"train": docs[:-n_val], "val": docs[-n_val:]}
    for name, part in splits.items():
        tokens, shard = [], 0
        for enc in tok.encode_batch(part):
            if eot is not None:
                tokens.append(eot)  # documents separated as GPT-2's data is
            tokens.extend(enc.ids)
            if len(tokens) >= args.shard_tokens:
                write_shard(os.path.join(args.out, f"{name}_{shard:06d}.bin"), tokens[:args.shard_tokens], vocab)
                tokens, shard = tokens[args.shard_tokens:], shard + 1
        if tokens or shard == 0:
            write_shard(os.path.join(args.out, f"{name}_{shard:06d}.bin"), tokens, vocab)
        print(f"{name}: {len(part)} documents", file=sys.stderr)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    print(f"wrote {args.out}: vocabulary {vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
