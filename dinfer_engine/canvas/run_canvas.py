"""The run's canvas, built from the family's canvas entry (dinfer_engine/choices.py), for
whichever loop runs it (dinfer_engine/loop.py): one object per run in every loop."""

from __future__ import annotations

from typing import Any

from dinfer_engine.batch import Request
from dinfer_engine.choices import load
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.prefix_cache import PrefixCache


def canvas_for(model: DiffusionLM, requests: list[Request], config: ResolvedConfig,
               prefix: PrefixCache | None) -> Any:
    """The run's canvas: the family's (its registry entry names it), or that canvas's
    infill class when a request has given text after its gaps. Built as
    `Canvas(config, model, prefix)`; `prefix`: the engine's prefix cache, which block
    diffusion's canvas shares."""
    canvas = model.family.canvas_choice
    reference = canvas.builds
    if canvas.infill is not None and any(r.canvas is not None for r in requests):
        reference = canvas.infill
    return load(reference)(config, model, prefix)


def sampled(model: DiffusionLM, config: ResolvedConfig) -> bool:
    """Whether the run's rows draw noise: at a temperature above 0, or always where the
    family's canvas samples (DiffusionGemma's)."""
    return model.family.canvas_choice.samples or config.temperature > 0
