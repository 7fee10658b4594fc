"""Tiny random models and a small BPE tokenizer with a chat template, built offline for tests and benchmarks.

Everything here is deterministic given `seed` and saved with `save_pretrained`, so the code under test loads it
back through the ordinary `from_pretrained` path, exactly as it would load a model from the hub.

    from tiny_models import tiny_rm, tiny_lm
    rm_dir = tiny_rm(tmp_path / "rm")              # LlamaForSequenceClassification, one label
    lm_dir = tiny_lm(tmp_path / "lm", arch="qwen2")  # Qwen2ForCausalLM
"""
from __future__ import annotations

from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]

# A Jinja chat template in the style of common instruction models: BOS first, one marker per turn, EOS per turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "Explain how a binary search works on a sorted list of numbers.",
    "Write a Python function that returns the square of a number: def square(x): return x * x",
    "The quick brown fox jumps over the lazy dog while the cat sleeps.",
    "I cannot help with that request, but here is some safer information instead.",
    "Answer A is better than answer B because it is correct and helpful. [[A]] [[B]] [[C]]",
    "La capital de Francia es París. El zorro marrón salta sobre el perro.",
    "Compute 12 + 30 = 42, then divide by 7 to get 6. Prime numbers: 2, 3, 5, 7, 11, 13.",
    "Please summarise the following text in two sentences, keeping the key facts.",
    "Sure! Here are three tips: drink water, sleep well, and take regular walks outside.",
]


def tiny_tokenizer(path: str | Path | None = None, vocab_size: int = 320, template: bool = True,
                   pad: bool = True, add_bos: bool = False):
    "Train a byte-level BPE tokenizer on a small built-in corpus and wrap it as a fast tokenizer."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    if add_bos:
        from tokenizers import processors
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", tok.token_to_id("<s>"))])
    kw = dict(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if pad:
        kw["pad_token"] = "<pad>"
    fast = PreTrainedTokenizerFast(**kw)
    if template:
        fast.chat_template = CHAT_TEMPLATE
    if path is not None:
        fast.save_pretrained(str(path))
    return fast


def _config(arch: str, vocab: int, tok, **extra):
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, tie_word_embeddings=False, **extra)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common)
    raise ValueError(f"unknown tiny architecture {arch!r}: use 'llama' or 'qwen2'")


def _init(model, seed: int):
    "Re-draw every weight from a seeded normal so that outputs vary across inputs (not near-constant)."
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def tiny_rm(path: str | Path, arch: str = "llama", seed: int = 0, **tok_kw) -> Path:
    "Save a one-label sequence-classification reward model (hidden size 32) with its tokenizer to `path`."
    from transformers import LlamaForSequenceClassification, Qwen2ForSequenceClassification
    path = Path(path)
    tok = tiny_tokenizer(path, **tok_kw)
    cfg = _config(arch, len(tok), tok, num_labels=1)
    cls = LlamaForSequenceClassification if arch == "llama" else Qwen2ForSequenceClassification
    _init(cls(cfg), seed).save_pretrained(str(path))
    return path


def tiny_lm(path: str | Path, arch: str = "llama", seed: int = 0, **tok_kw) -> Path:
    "Save a causal language model (hidden size 32) with its tokenizer to `path` (policy, reference or judge)."
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM
    path = Path(path)
    tok = tiny_tokenizer(path, **tok_kw)
    cfg = _config(arch, len(tok), tok)
    cls = LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM
    _init(cls(cfg), seed).save_pretrained(str(path))
    return path
