"""One engine per worker process, loaded on the first chunk that needs it (after any
fork, never before) and kept for every later chunk of the same model.

`DINFER_BATCH_ENGINE=module:factory` replaces the engine with `factory(model, device)`,
an object with the same `generate` and `tokenizer`; benchmarks use it to measure the
service without the model's cost."""

from __future__ import annotations

import importlib
import os
from typing import Any

_loaded: dict[tuple[str, str], Any] = {}


def get_engine(model: str, device: str) -> Any:
    key = (model, device)
    if key not in _loaded:
        _loaded.clear()
        _loaded[key] = _factory()(model, device)
    return _loaded[key]


def _factory() -> Any:
    spec = os.environ.get("DINFER_BATCH_ENGINE")
    if not spec:
        from engine import Engine

        return lambda model, device: Engine.from_pretrained(model, device=device)
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def generation_config(fields: dict[str, Any]) -> Any:
    """The engine's GenerationConfig; it raises ValueError for invalid values."""
    from engine import GenerationConfig

    return GenerationConfig(**fields)


def resolve_config(fields: dict[str, Any], model_defaults: dict[str, Any]) -> Any:
    """The config as the engine would complete it from a model's generation_config.json;
    ValueError when the values are invalid."""
    return generation_config(fields).resolve(model_defaults)
