"""A tiny random-weight checkpoint in the exact LLaDA-8B-Instruct layout, for tests and
the benchmark: config.json with LLaDA's field names, sharded safetensors with an index,
a character tokenizer saved with save_pretrained, and generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dinfer_engine.loading.checkpoint import save_model
from dinfer_engine.models.config import LLaDAConfig
from dinfer_engine.models.llada import LLaDAModelLM
from dinfer_training.char_tokenizer import save_char_tokenizer

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +=?."
EOS_ID, MASK_ID, PAD_ID = 1, 3, 0
EXTRA_STOP_ID = 6  # "." ; generation_config.json adds it as a second stop token (LLaDA: <|eot_id|>)


def llada_config(vocab_size: int, **overrides: Any) -> dict[str, Any]:
    """config.json as LLaDA-8B-Instruct writes it, with tiny dimensions."""
    config = {
        "activation_type": "silu",
        "alibi": False,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": 32,
        "embedding_dropout": 0.0,
        "embedding_size": vocab_size,
        "eos_token_id": EOS_ID,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_fn": "mitchell",
        "init_std": 0.02,
        "layer_norm_type": "rms",
        "mask_token_id": MASK_ID,
        "max_sequence_length": 256,
        "mlp_hidden_size": 64,
        "mlp_ratio": 4,
        "model_type": "llada",
        "n_heads": 4,
        "n_kv_heads": 2,
        "n_layers": 2,
        "pad_token_id": PAD_ID,
        "precision": "amp_bf16",
        "rms_norm_eps": 1e-5,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 10000.0,
        "scale_logits": False,
        "use_cache": False,
        "vocab_size": vocab_size,
        "weight_tying": False,
    }
    config.update(overrides)
    return config


def random_model(config: dict[str, Any], seed: int) -> LLaDAModelLM:
    """Random weights scaled so logits are peaky (std ~8): near-ties between confidences,
    which would make exact-equality tests flaky, are then rare."""
    generator = torch.Generator().manual_seed(seed)
    model = LLaDAModelLM(LLaDAConfig.from_dict(config))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=generator))
            elif name.endswith("wte.weight") or name.endswith("transformer.ff_out.weight"):
                param.copy_(1.5 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator) / param.shape[1] ** 0.5)
    return model.eval()


def write_tiny_checkpoint(directory: Path, seed: int = 0, max_shard_bytes: int | None = 20_000,
                          **config_overrides: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = save_char_tokenizer(CHARS, directory)
    config = llada_config(len(tokenizer), **config_overrides)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [EOS_ID, EXTRA_STOP_ID], "pad_token_id": PAD_ID}))
    save_model(random_model(config, seed), directory, dtype=torch.float32,
               max_shard_bytes=max_shard_bytes)
    return directory
