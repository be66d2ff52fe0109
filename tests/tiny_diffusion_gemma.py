"""Tiny random DiffusionGemma checkpoints made with transformers' own classes
(`DiffusionGemmaForBlockDiffusion(...).save_pretrained`), so config.json,
generation_config.json and the tensor names are the real layout; the character tokenizer
of tests/tiny_model.py. Weights are re-drawn so logits are peaky (near-ties between
entropies and samples would make exact-equality tests flaky) and adaptive stopping fires."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dinfer_training.char_tokenizer import save_char_tokenizer
from tests.tiny_model import CHARS, EOS_ID, PAD_ID

CANVAS_LENGTH = 8
SLIDING_WINDOW = 5  # shorter than the tests' prompts

# two shapes: the second has more experts, other head dims and KV heads per layer type
SHAPES: dict[str, dict[str, Any]] = {
    "small": {"num_experts": 2, "top_k_experts": 1, "num_hidden_layers": 3,
              "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
              "head_dim": 8, "global_head_dim": 16, "num_global_key_value_heads": 1},
    "moe": {"num_experts": 4, "top_k_experts": 2, "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                            "full_attention"],
            "head_dim": 16, "global_head_dim": 32, "num_global_key_value_heads": 2},
}

GENERATION_CONFIG = {"max_denoising_steps": 10, "t_min": 0.4, "t_max": 0.8,
                     "stability_threshold": 1, "confidence_threshold": 0.1,
                     "sampler_config": {"entropy_bound": 0.5,
                                        "_cls_name": "EntropyBoundSamplerConfig"},
                     "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def text_config(vocab_size: int, shape: str, hidden: int = 32,
                **overrides: Any) -> dict[str, Any]:
    config = {"vocab_size": vocab_size, "hidden_size": hidden, "intermediate_size": 2 * hidden,
              "num_attention_heads": 4, "num_key_value_heads": 2,
              "moe_intermediate_size": hidden // 2, "sliding_window": SLIDING_WINDOW,
              "max_position_embeddings": 512, "pad_token_id": PAD_ID,
              "eos_token_id": EOS_ID, "bos_token_id": None, **SHAPES[shape]}
    config.update(overrides)
    return config


def build(vocab_size: int, shape: str, seed: int, canvas_length: int = CANVAS_LENGTH,
          **overrides: Any) -> Any:
    """transformers' DiffusionGemmaForBlockDiffusion with re-drawn random weights."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 8}
    config = DiffusionGemmaConfig(text_config=text_config(vocab_size, shape, **overrides),
                                  vision_config=vision, canvas_length=canvas_length)
    model = DiffusionGemmaForBlockDiffusion(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "vision" in name:
                continue
            if name.endswith("embed_tokens.weight"):
                param.copy_(1.5 * torch.randn(param.shape, generator=generator))
            elif param.dim() == 1:  # norms and router scales
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator)
                            / param.shape[-1] ** 0.5)
    return model


def write_tiny_diffusion_gemma(directory: Path, shape: str = "small", seed: int = 0,
                               generation: dict[str, Any] | None = None,
                               **overrides: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = save_char_tokenizer(CHARS, directory)
    vocab = overrides.pop("vocab_size", len(tokenizer))  # beyond the tokenizer: ids only
    build(vocab, shape, seed, **overrides).save_pretrained(directory)
    (directory / "generation_config.json").write_text(
        json.dumps(generation or GENERATION_CONFIG, indent=2))
    return directory
