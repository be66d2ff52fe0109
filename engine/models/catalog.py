"""The model families a checkpoint's config.json can name, and what each recommends, read
without torch (the service shows them: dinfer_batch/model_info.py); the classes that
build each family are engine/models/families.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    name: str  # as users know it
    generation_defaults: dict[str, Any]  # GenerationConfig fields, under the checkpoint's
    block_causal: bool = False  # block diffusion: a block never sees the text after it
    uniform_noise: bool = False  # DiffusionGemma's canvases (engine/canvas/uniform.py)


FAMILIES: dict[str, Family] = {
    "llada": Family("LLaDA", {}),
    "llada_moe": Family("LLaDA-MoE", {}),
    # LLaDA2's published generate: threshold 0.95, blocks of 32, one block's length of
    # steps per block (steps = gen_length)
    "llada2": Family("LLaDA2", {"decoder": "threshold", "threshold": 0.95,
                                "block_length": 32}, block_causal=True),
    # LLaDA2.1's published generate (engine/decoding/editing.py): the same architecture,
    # decoded with token editing, with its defaults
    "llada21": Family("LLaDA2.1", {"decoder": "editing", "threshold": 0.95,
                                   "editing_threshold": 0.9, "max_post_steps": 16,
                                   "num_to_transfer": 1, "block_length": 32},
                      block_causal=True),
    # DiffusionGemma: transformers' global defaults for its generate (the checkpoint's
    # generation_config.json overrides them); docs/adr/027-diffusion-gemma.md
    "diffusion_gemma": Family("DiffusionGemma", {
        "max_denoising_steps": 48, "entropy_bound": 0.1, "t_min": 0.4, "t_max": 0.8,
        "stability_threshold": 1, "confidence_threshold": 0.005, "gen_length": 256},
        block_causal=True, uniform_noise=True),
}

# config.json's model_type -> family. LLaDA-MoE's public checkpoint says "llada" (told
# apart by its keys); "llada21_moe" is LLaDA2.1's model_type in dllm's LLaDA2.1 config
MODEL_TYPES: dict[str, str] = {"llada": "llada", "lladamoe": "llada_moe",
                               "llada2_moe": "llada2", "llada21_moe": "llada21",
                               "diffusion_gemma": "diffusion_gemma"}


def family_key(raw: dict[str, Any]) -> str | None:
    """The FAMILIES key of a config.json's fields, or None when no family reads it."""
    key = MODEL_TYPES.get(str(raw.get("model_type")))
    if key == "llada" and raw.get("num_experts") and raw.get("num_hidden_layers"):
        return "llada_moe"
    return key
