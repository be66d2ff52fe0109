"""Model families: which class builds the family a checkpoint's config.json describes
(engine/models/catalog.py names them)."""

from __future__ import annotations

from typing import Any

from engine.models.base import DiffusionLM
from engine.models.catalog import MODEL_TYPES, family_key
from engine.models.diffusion_gemma import DiffusionGemmaLM
from engine.models.llada import LLaDAModelLM
from engine.models.llada2 import LLaDA2MoeModelLM, LLaDA21MoeModelLM
from engine.models.llada_moe import LLaDAMoEModelLM

__all__ = ["CLASSES", "MODEL_TYPES", "family_of"]

CLASSES: dict[str, type[DiffusionLM]] = {
    "llada": LLaDAModelLM,
    "llada_moe": LLaDAMoEModelLM,
    "llada2": LLaDA2MoeModelLM,
    "llada21": LLaDA21MoeModelLM,
    "diffusion_gemma": DiffusionGemmaLM,
}


def family_of(raw: dict[str, Any]) -> type[DiffusionLM] | None:
    """The family class for a config.json, or None when no family reads it."""
    key = family_key(raw)
    return None if key is None else CLASSES[key]
