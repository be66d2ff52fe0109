"""Model families: the class that builds the family a checkpoint's config.json describes
(dinfer_engine/choices.py names them and their classes)."""

from __future__ import annotations

from typing import Any

from dinfer_engine.choices import FAMILIES, family_key
from dinfer_engine.models.base import DiffusionLM


def family_of(raw: dict[str, Any]) -> type[DiffusionLM] | None:
    """The family class for a config.json, or None when no family reads it."""
    key = family_key(raw)
    if key is None:
        return None
    family: type[DiffusionLM] = FAMILIES[key].load()
    return family
