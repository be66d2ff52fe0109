"""Tiny random checkpoints of the three masked families and DiffusionGemma whose
character tokenizer can spell JSON, for the structured-output tests: the layouts of
tests/tiny_model.py, tests/tiny_moe.py and tests/tiny_diffusion_gemma.py (64 vocabulary
rows, so tensor parallelism splits them), with the tokenizer replaced. Token 6 ("+")
stays a second stop token in the masked families, as in their tiny models."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from dinfer_engine.loading.checkpoint import save_model
from dinfer_training.char_tokenizer import SPECIALS, save_char_tokenizer
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma
from tests.tiny_model import llada_config, random_model, write_tiny_checkpoint
from tests.tiny_moe import write_tiny_moe

JSON_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789 {}[]":,.-+_'
VOCAB = 64
LLADA_VOCAB = 126_464  # LLaDA's vocabulary size
FAMILIES = ("llada", "llada_moe", "llada2")
# nested objects, left open (additionalProperties defaults to true), and a number array
NESTED_SCHEMA = {"type": "object", "properties": {
    "user": {"type": "object", "properties": {
        "id": {"type": "integer"}, "born": {"type": "string", "format": "date"}},
        "required": ["id"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4}},
    "required": ["user", "scores"]}


def write_json_model(directory: Path, family: str = "llada", seed: int = 0) -> Path:
    if family == "llada":
        write_tiny_checkpoint(directory, seed=seed, embedding_size=VOCAB)
    else:
        write_tiny_moe(directory, family, seed=seed, fused=family == "llada2",
                       vocab_size=VOCAB)
    save_char_tokenizer(JSON_CHARS, directory)
    return directory


def write_json_diffusion_gemma(directory: Path, seed: int = 0) -> Path:
    """DiffusionGemma made with transformers' own classes (the "small" shape)."""
    write_tiny_diffusion_gemma(directory, seed=seed, vocab_size=VOCAB)
    save_char_tokenizer(JSON_CHARS, directory)
    return directory


def big_vocab_tokenizer(directory: Path, size: int) -> None:
    """A BPE tokenizer of `size` tokens saved in `directory`: the specials, every printable
    ASCII character, then random strings of 2-8 characters drawn from letters, digits and
    JSON punctuation (no merges: text encodes to characters, the model may answer with
    any token)."""
    directory.mkdir(parents=True, exist_ok=True)
    chars = [chr(c) for c in range(32, 127)]
    vocab = {token: i for i, token in enumerate(SPECIALS + chars)}
    pieces = "abcdefghijklmnopqrstuvwxyz0123456789 " * 3 + '{}[]":,.-_'
    rng = random.Random(0)
    while len(vocab) < size:
        token = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 8)))
        vocab.setdefault(token, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIALS[2]))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIALS)
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=SPECIALS[1],
                            pad_token=SPECIALS[0], unk_token=SPECIALS[2],
                            mask_token=SPECIALS[3]).save_pretrained(directory)


def big_vocab_checkpoint(directory: Path, size: int = LLADA_VOCAB) -> Path:
    """A random LLaDA checkpoint (2 layers, d_model 32) with big_vocab_tokenizer's
    vocabulary of `size` tokens."""
    big_vocab_tokenizer(directory, size)
    return random_llada_beside(directory, size)


def random_llada_beside(directory: Path, size: int) -> Path:
    """A random LLaDA checkpoint (2 layers, d_model 32) of `size` tokens, written beside
    the tokenizer already saved in `directory`."""
    config = llada_config(size, max_sequence_length=512)
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    save_model(random_model(config, seed=0), directory, dtype=torch.float32,
               max_shard_bytes=None)
    return directory
