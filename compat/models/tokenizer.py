"""A small byte-level BPE tokenizer, trained here with ``tokenizers``: nothing is downloaded."""

from __future__ import annotations

import json
import random
from pathlib import Path

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (BOS, EOS, PAD)
"""Ids 0, 1, 2: the model configs the builder writes name these ids."""

# A fixed word list: the corpus is generated from it with a seeded RNG, so the same
# vocabulary comes out on every machine (the trainer is deterministic for a given corpus).
_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which not have "
    "but all were when we there can more if will one about some out so up what their into time has "
    "model layer hidden state token tensor shape vllm engine cache block batch sample prompt decode "
    "prefill speculative draft verifier eagle training data file header dtype float bfloat half "
    "attention expert router residual norm weight bias vocab sequence length mask loss gate value"
).split()

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""A minimal template so chat-based preprocessing (speculators', for one) can run on the tiny models."""


def _corpus(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        out.append(" ".join(words) + rng.choice([".", ",", "?", "!", ":"]))
    return out


def build_tokenizer(directory: Path, vocab_size: int, model_max_length: int, seed: int = 0) -> int:
    """Train and save a fast tokenizer (``tokenizer.json`` + config) in ``directory``; returns its vocab size.

    ``vocab_size`` is an upper bound: the trainer stops when the corpus has no more merges.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(4000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   model_max_length=model_max_length)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(directory))
    _check_saved(directory)
    return tok.get_vocab_size()


def _check_saved(directory: Path) -> None:
    # save_pretrained has changed what it writes across transformers releases; a fast
    # tokenizer needs tokenizer.json, which every loader (vLLM's included) looks for first.
    data = json.loads((directory / "tokenizer.json").read_text())
    if data.get("model", {}).get("type") != "BPE":
        raise RuntimeError(f"{directory / 'tokenizer.json'}: expected a BPE model, found {data.get('model')!r}")
