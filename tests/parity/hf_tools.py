"""The Hugging Face side of ltrain's language-model tests: builds small random transformers models
locally (no downloads), runs them, and trains and applies tokenizers with the `tokenizers` package.

  hf_tools.py make-llama DIR --vocab V [--tied] [--shards] [--seed S]
  hf_tools.py make-gpt2 DIR --vocab V [--seed S]
  hf_tools.py make-qwen3 DIR --vocab V [--tied] [--seed S]    (head_dim 16, wider than 32 / 4)
  hf_tools.py make-mistral DIR --vocab V [--tied] [--seed S] [--window W]
  hf_tools.py make-mixtral DIR --vocab V [--tied] [--seed S] [--window W] [--aux C] [--router-loss]
  hf_tools.py make-qwen3_moe DIR --vocab V [--tied] [--seed S] [--raw-topk] [--aux C] [--router-loss]
  hf_tools.py router-losses DIR IDS.safetensors OUT.safetensors   (logits, aux_loss, loss)
  hf_tools.py logits DIR IDS.safetensors OUT.safetensors     (transformers' logits for ids)
  hf_tools.py make-adapter BASE OUT [--targets q_proj,v_proj] [--rank R] [--alpha A] [--seed S] [--dora]
                                                              (a PEFT LoRA adapter; B not zero)
  hf_tools.py peft-logits BASE ADAPTER IDS.safetensors OUT.safetensors
                                                              (PEFT's logits: the adapter on BASE)
  hf_tools.py add-chat-tokenizer DIR VOCAB TEXT...             (a byte-level BPE with a chat
                                                               template, saved into model DIR)
  hf_tools.py make-pairs OUT.jsonl TEXTFILE N {chat,implicit,text}
                                                              (N preference pairs of fortunes)
  hf_tools.py chat-masks DIR JSONL OUT.safetensors             (transformers' assistant masks)
  hf_tools.py make-chats OUT.jsonl TEXTFILE N                  (N examples of fortunes, in all
                                                               three shapes, multi-turn ones too)
  hf_tools.py generate DIR TOKENIZER PROMPT N                 (greedy; prints prompt + text)
  hf_tools.py make-tokenizer OUT {gpt2,llama3} VOCAB FILE...  (a byte-level BPE tokenizer.json)
  hf_tools.py encode TOKENIZER TEXTFILE                       (one line of ids per text line)
  hf_tools.py eager-vs-transformers                           (bench's EagerLlama against
                                                               transformers; prints max |diff|)
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from safetensors.torch import load_file, save_file

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def flag(args, name):
    return name in args


def value(args, name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


def make_llama(d, args):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(value(args, "--seed", 0))
    cfg = LlamaConfig(vocab_size=value(args, "--vocab", 64), hidden_size=32, intermediate_size=80,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                      tie_word_embeddings=flag(args, "--tied"), bos_token_id=None, eos_token_id=None)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from their ones, so that a missed weight shows
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    # A tiny max_shard_size splits the weights into several files and an index.
    model.save_pretrained(d, max_shard_size="20KB" if flag(args, "--shards") else "10GB")


def perturb_norms(model):
    with torch.no_grad():  # norms away from their ones, so that a missed weight shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))


def make_qwen3(d, args):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(value(args, "--seed", 0))
    # head_dim 16 with 4 heads of a 32-wide model: Qwen3's heads are wider than hidden / heads.
    cfg = Qwen3Config(vocab_size=value(args, "--vocab", 64), hidden_size=32, intermediate_size=80,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=value(args, "--positions", 128), rms_norm_eps=1e-6, rope_theta=1000000.0,
                      tie_word_embeddings=flag(args, "--tied"), bos_token_id=None, eos_token_id=None)
    model = Qwen3ForCausalLM(cfg)
    perturb_norms(model)
    model.save_pretrained(d)


def make_mistral(d, args):
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(value(args, "--seed", 0))
    cfg = MistralConfig(vocab_size=value(args, "--vocab", 64), hidden_size=32, intermediate_size=80,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                        sliding_window=value(args, "--window", 8),
                        tie_word_embeddings=flag(args, "--tied"), bos_token_id=None, eos_token_id=None)
    model = MistralForCausalLM(cfg)
    perturb_norms(model)
    model.save_pretrained(d)


def decisive_routers(model):
    """Routers drawn wide (N(0, 0.5)), so that no token's top-k choice hangs on a rounding
    difference between two implementations (transformers' std 0.02 makes near-ties)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".gate.weight"):
                p.normal_(0.0, 0.5)


def make_mixtral(d, args):
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(value(args, "--seed", 0))
    window = value(args, "--window", 0)
    cfg = MixtralConfig(vocab_size=value(args, "--vocab", 64), hidden_size=32, intermediate_size=48,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128,
                        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=window or None,
                        router_aux_loss_coef=value(args, "--aux", 0.001),
                        output_router_logits=flag(args, "--router-loss"),
                        tie_word_embeddings=flag(args, "--tied"), bos_token_id=None, eos_token_id=None)
    model = MixtralForCausalLM(cfg)
    decisive_routers(model)
    perturb_norms(model)
    model.save_pretrained(d)


def make_qwen3_moe(d, args):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(value(args, "--seed", 0))
    cfg = Qwen3MoeConfig(vocab_size=value(args, "--vocab", 64), hidden_size=32, intermediate_size=80,
                         moe_intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_experts=6, num_experts_per_tok=3,
                         norm_topk_prob=not flag(args, "--raw-topk"), max_position_embeddings=128,
                         rms_norm_eps=1e-6, rope_theta=1000000.0,
                         router_aux_loss_coef=value(args, "--aux", 0.001),
                         output_router_logits=flag(args, "--router-loss"),
                         tie_word_embeddings=flag(args, "--tied"), bos_token_id=None, eos_token_id=None)
    model = Qwen3MoeForCausalLM(cfg)
    decisive_routers(model)
    perturb_norms(model)
    model.save_pretrained(d)


def router_losses(d, ids_file, out):
    """transformers' loss terms of a causal LM with routers: the logits, aux_loss (its
    load-balancing loss) and the loss with labels = ids (shifted inside, as transformers does)."""
    ids = load_file(ids_file)["ids"]
    model = load(d)
    model.config.output_router_logits = True
    with torch.no_grad():
        o = model(input_ids=ids, labels=ids, output_router_logits=True)
    save_file({"logits": o.logits.contiguous(), "aux_loss": o.aux_loss.reshape(1),
               "loss": o.loss.reshape(1)}, out)


def make_gpt2(d, args):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(value(args, "--seed", 0))
    cfg = GPT2Config(vocab_size=value(args, "--vocab", 64), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "ln" in n:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(d)


def load(d):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    return model


def logits(d, ids_file, out):
    ids = load_file(ids_file)["ids"]
    with torch.no_grad():
        save_file({"logits": load(d)(input_ids=ids).logits.contiguous()}, out)


def make_adapter(base, out, args):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(value(args, "--seed", 0))
    cfg = LoraConfig(r=value(args, "--rank", 4), lora_alpha=value(args, "--alpha", 8), lora_dropout=0.0,
                     target_modules=value(args, "--targets", "q_proj,v_proj").split(","),
                     task_type="CAUSAL_LM", use_dora=flag(args, "--dora"),
                     init_lora_weights=False)  # B drawn too, not zero: an adapter not loaded shows
    model = get_peft_model(load(base), cfg)
    with torch.no_grad():  # DoRA's magnitudes away from the norms they start at
        for n, p in model.named_parameters():
            if "lora_magnitude_vector" in n:
                p.mul_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(out)


def peft_logits(base, adapter, ids_file, out):
    from peft import PeftModel
    model = PeftModel.from_pretrained(load(base), adapter)
    model.eval()
    ids = load_file(ids_file)["ids"]
    with torch.no_grad():
        save_file({"logits": model(input_ids=ids).logits.contiguous()}, out)


# Assistant turns inside {% generation %}: transformers' return_assistant_tokens_mask then marks
# them, an oracle for scripts/prepare_chat.py's masks, which it computes from the plain rendering.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}<|start|>assistant\n"
                 "{% generation %}{{ m['content'] }}<|end|>\n{% endgeneration %}{% else %}<|start|>"
                 "{{ m['role'] }}\n{{ m['content'] }}<|end|>\n{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}")


def add_chat_tokenizer(d, vocab, files):
    from transformers import PreTrainedTokenizerFast
    out = os.path.join(d, "tokenizer.json")
    make_tokenizer(out, "llama3", vocab, files)
    tok = PreTrainedTokenizerFast(tokenizer_file=out, bos_token="<|begin_of_text|>",
                                  eos_token="<|end_of_text|>", additional_special_tokens=["<|start|>", "<|end|>"])
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)


def make_chats(out, textfile, n):
    with open(textfile, encoding="utf-8", errors="replace") as f:
        docs = [d.strip() for d in f.read().split("\n%\n") if d.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for i in range(int(n)):
            a, b, c = (docs[(3 * i + k) % len(docs)][:80] for k in range(3))
            if i % 3 == 0:
                rec = {"messages": [{"role": "system", "content": "Answer with a fortune."},
                                    {"role": "user", "content": a}, {"role": "assistant", "content": b},
                                    {"role": "user", "content": "Another?"}, {"role": "assistant", "content": c}]}
            elif i % 3 == 1:
                rec = {"prompt": a, "completion": b}
            else:
                rec = {"instruction": "Continue.", "input": a, "output": b}
            f.write(json.dumps(rec) + "\n")


def make_pairs(out, textfile, n, shape):
    """Preference pairs in TRL's shapes: an explicit prompt of messages, an implicit one (whole
    conversations that share their opening), or text; the chosen answer is the shorter fortune."""
    with open(textfile, encoding="utf-8", errors="replace") as f:
        docs = [d.strip() for d in f.read().split("\n%\n") if d.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for i in range(int(n)):
            a, b, c = (docs[(3 * i + k) % len(docs)][:60] for k in range(3))
            b, c = sorted((b, c), key=len)
            if shape == "text":
                rec = {"prompt": a + "\n", "chosen": b, "rejected": c}
            else:
                prompt = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": a}]
                chosen, rejected = ([{"role": "assistant", "content": x}] for x in (b, c))
                rec = ({"prompt": prompt, "chosen": chosen, "rejected": rejected} if shape == "chat" else
                       {"chosen": prompt + chosen, "rejected": prompt + rejected})
            f.write(json.dumps(rec) + "\n")


def chat_masks(d, jsonl, out):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
    from prepare_chat import messages_of
    ids, masks = [], []
    with open(jsonl, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            enc = tok.apply_chat_template(messages_of(json.loads(line), n), tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=True)
            ids += enc["input_ids"]
            masks += enc["assistant_masks"]
    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "mask": torch.tensor(masks, dtype=torch.uint8)}, out)


def generate(d, tokenizer, prompt, n):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    ids = torch.tensor([tok.encode(prompt).ids])
    with torch.no_grad():
        out = load(d).generate(ids, max_new_tokens=int(n), do_sample=False, eos_token_id=None, pad_token_id=0)
    new = out[0, ids.shape[1]:].tolist()
    print(json.dumps({"text": prompt + tok.decode(new, skip_special_tokens=False), "ids": new}))


def make_tokenizer(out, kind, vocab, files):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    specials = ["<|endoftext|>"] if kind == "gpt2" else ["<|begin_of_text|>", "<|end_of_text|>"]
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab), special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(out)


def encode(tokenizer, textfile):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    with open(textfile, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            print(" ".join(map(str, tok.encode(line.replace("\\n", "\n")).ids)))


def make_sp_tokenizer(out, vocab, files):
    # SentencePiece's BPE with byte fallback, as Llama 2's and Mistral's tokenizer.model, trained
    # here; tokenizer.json is the same vocabulary as transformers' fast Llama tokenizer lays it out
    # (a Metaspace pre-tokenizer, byte fallback, the merges read off the pieces as transformers'
    # SentencePieceExtractor does), and legacy.json its older form (Prepend and Replace
    # normalizers, as Llama 2's hub file) with <s> first.
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    os.makedirs(out, exist_ok=True)
    spm.SentencePieceTrainer.train(input=",".join(files), model_prefix=os.path.join(out, "tokenizer"),
                                   vocab_size=int(vocab), model_type="bpe", byte_fallback=True,
                                   character_coverage=0.995, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    pieces = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, pid in sorted(pieces.items(), key=lambda kv: kv[1]):
        splits = [(pieces[piece[:k]], pieces[piece[k:]], piece[:k], piece[k:])
                  for k in range(1, len(piece)) if piece[:k] in pieces and piece[k:] in pieces]
        merges += [(a, b) for _, _, a, b in sorted(splits)]
    specials = ["<unk>", "<s>", "</s>"]

    def build(legacy):
        tok = Tokenizer(models.BPE(vocab=pieces, merges=merges, byte_fallback=True, fuse_unk=True,
                                   unk_token="<unk>"))
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        if legacy:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                   normalizers.Replace(" ", "\u2581")])
            tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                               special_tokens=[("<s>", pieces["<s>"])])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                         split=False)
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        return tok
    build(False).save(os.path.join(out, "tokenizer.json"))
    build(True).save(os.path.join(out, "legacy.json"))


def make_sp_model(out, vocab, files):
    # A SentencePiece BPE model as Llama 2's tokenizer.model is made: the identity normalizer,
    # spaces kept as they are, byte fallback, digits split, pieces of spaces alone allowed.
    import sentencepiece as spm
    os.makedirs(out, exist_ok=True)
    spm.SentencePieceTrainer.train(input=",".join(files), model_prefix=os.path.join(out, "tokenizer"),
                                   vocab_size=int(vocab), model_type="bpe", byte_fallback=True,
                                   character_coverage=0.995, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
                                   split_digits=True, minloglevel=2)


def sp_encode_decode(model, textfile):
    # One JSON line per line of text: <s> and the ids sentencepiece gives it (as transformers'
    # Llama tokenizer adds <s>), and those ids decoded by sentencepiece.
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(textfile, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            ids = [sp.bos_id()] + sp.encode(line.replace("\\n", "\n"))
            print(json.dumps({"ids": ids, "text": sp.decode(ids)}))


def encode_decode(tokenizer, textfile):
    # One JSON line per line of text: its ids, and those ids decoded, by tokenizers.
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    enc = lambda t: tok.encode(t).ids
    dec = lambda ids: tok.decode(ids, skip_special_tokens=False)
    with open(textfile, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            ids = enc(line.replace("\\n", "\n"))
            print(json.dumps({"ids": ids, "text": dec(ids)}))


def eager_vs_transformers():
    # bench/reference's pure-PyTorch Llama (the Python side of the ddp parity test and the speed
    # bench) must be transformers' model, not a look-alike: same weights, same logits.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "reference"))
    from llama_ref import EagerLlama, transformers_llama
    worst = 0.0
    for tied in (False, True):
        m = dict(n_embd=48, n_head=4, n_kv_head=2, n_layer=2, intermediate_size=96,
                 block_size=32, norm_eps=1e-5, rope_theta=10000.0, tie_weights=tied, dropout=0.0)
        torch.manual_seed(0)
        eager = EagerLlama(m, 100).eval()
        theirs = transformers_llama(m, 100).eval()
        theirs.load_weights(eager.weights())
        ids = torch.randint(100, (2, 32))
        with torch.no_grad():
            worst = max(worst, (eager(ids) - theirs(ids)).abs().max().item())
    print(f"max |diff| {worst:.3g}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make-llama":
        make_llama(args[0], args[1:])
    elif cmd == "make-gpt2":
        make_gpt2(args[0], args[1:])
    elif cmd == "make-qwen3":
        make_qwen3(args[0], args[1:])
    elif cmd == "make-mistral":
        make_mistral(args[0], args[1:])
    elif cmd == "make-mixtral":
        make_mixtral(args[0], args[1:])
    elif cmd == "make-qwen3_moe":
        make_qwen3_moe(args[0], args[1:])
    elif cmd == "router-losses":
        router_losses(*args)
    elif cmd == "logits":
        logits(*args)
    elif cmd == "make-adapter":
        make_adapter(args[0], args[1], args[2:])
    elif cmd == "peft-logits":
        peft_logits(*args)
    elif cmd == "add-chat-tokenizer":
        add_chat_tokenizer(args[0], args[1], args[2:])
    elif cmd == "make-chats":
        make_chats(*args)
    elif cmd == "make-pairs":
        make_pairs(*args)
    elif cmd == "chat-masks":
        chat_masks(*args)
    elif cmd == "generate":
        generate(*args)
    elif cmd == "make-tokenizer":
        make_tokenizer(args[0], args[1], args[2], args[3:])
    elif cmd == "encode":
        encode(*args)
    elif cmd == "make-sp-tokenizer":
        make_sp_tokenizer(args[0], args[1], args[2:])
    elif cmd == "make-sp-model":
        make_sp_model(args[0], args[1], args[2:])
    elif cmd == "sp-encode-decode":
        sp_encode_decode(*args)
    elif cmd == "encode-decode":
        encode_decode(*args)
    elif cmd == "eager-vs-transformers":
        eager_vs_transformers()
    else:
        sys.exit(f"hf_tools.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
