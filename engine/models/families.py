"""Model families: which one a checkpoint's config.json describes."""

from __future__ import annotations

from typing import Any

from engine.models.base import DiffusionLM
from engine.models.llada import LLaDAModelLM
from engine.models.llada2 import LLaDA2MoeModelLM
from engine.models.llada_moe import LLaDAMoEModelLM

# LLaDA-MoE is told apart from dense LLaDA by its keys: the public checkpoint says "llada"
MODEL_TYPES: dict[str, type[DiffusionLM]] = {
    "llada": LLaDAModelLM,
    "lladamoe": LLaDAMoEModelLM,
    "llada2_moe": LLaDA2MoeModelLM,
}


def family_of(raw: dict[str, Any]) -> type[DiffusionLM] | None:
    """The family class for a config.json, or None when no family reads it."""
    family = MODEL_TYPES.get(str(raw.get("model_type")))
    if family is LLaDAModelLM and raw.get("num_experts") and raw.get("num_hidden_layers"):
        return LLaDAMoEModelLM
    return family

