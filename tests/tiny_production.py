"""Tiny random checkpoints that carry a production tokenizer (tests/assets/tokenizers/,
from the mistral-common wheel): the LLaDA layout with the SentencePiece BPE with byte
fallback (spaces as U+2581, bytes as <0xNN>: Gemma's and LLaDA's kind) and the LLaDA2
layout with the tekken byte-level BPE (LLaDA2's kind), each with the chat template the
real model ships (mistral-common's, tools included). Made at test time from the shipped
tokenizer files; no weights are shipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from dinfer_engine.loading.checkpoint import save_model
from tests.tiny_model import llada_config, random_model
from tests.tiny_moe import llada2_config, llada2_shapes, random_tensors, write_checkpoint

TOKENIZERS = Path(__file__).parent / "assets" / "tokenizers"
SENTENCEPIECE, BYTE_LEVEL = "mistral-sp-v3", "tekken-16k"
# both vocabularies: <unk>=0, <s>=1, </s>=2; the mask is an unused control token
SPECIAL_IDS = {SENTENCEPIECE: {"vocab": 32768, "mask": 750},
               BYTE_LEVEL: {"vocab": 17384, "mask": 999}}
EOS_ID, PAD_ID = 2, 0
# what generation_config.json says when a line does not: a short answer in blocks of 8
GENERATION = {"gen_length": 16, "block_length": 8, "steps": 16, "decoder": "threshold",
              "threshold": 0.9, "temperature": 0.0}


def copy_tokenizer(name: str, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for path in (TOKENIZERS / name).iterdir():
        shutil.copy(path, directory / path.name)


def write_generation_config(directory: Path, **overrides: Any) -> None:
    (directory / "generation_config.json").write_text(json.dumps(
        {**GENERATION, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, **overrides}))


def write_llada_sentencepiece(directory: Path, seed: int = 0,
                              context: int = 256) -> Path:
    """LLaDA-8B-Instruct's layout (tests/tiny_model.py) with the SentencePiece tokenizer."""
    copy_tokenizer(SENTENCEPIECE, directory)
    ids = SPECIAL_IDS[SENTENCEPIECE]
    config = llada_config(ids["vocab"], eos_token_id=EOS_ID, mask_token_id=ids["mask"],
                          pad_token_id=PAD_ID, max_sequence_length=context)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    write_generation_config(directory)
    save_model(random_model(config, seed), directory, dtype=torch.float32)
    return directory


def write_llada2_byte_level(directory: Path, seed: int = 0, context: int = 256) -> Path:
    """LLaDA2.0-mini's layout (tests/tiny_moe.py) with the tekken byte-level BPE; the mask
    id comes from the tokenizer, as in the public LLaDA2 configs."""
    copy_tokenizer(BYTE_LEVEL, directory)
    config = llada2_config(SPECIAL_IDS[BYTE_LEVEL]["vocab"], eos_token_id=EOS_ID,
                           pad_token_id=PAD_ID, max_position_embeddings=context)
    write_checkpoint(directory, config, random_tensors(llada2_shapes(config), seed))
    write_generation_config(directory)
    return directory


WRITERS = {SENTENCEPIECE: write_llada_sentencepiece, BYTE_LEVEL: write_llada2_byte_level}
