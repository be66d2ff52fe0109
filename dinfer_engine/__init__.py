"""dLLM inference engine: LLaDA, LLaDA-MoE and LLaDA2 models, block diffusion decoding,
KV caches.

`Engine` and the models import torch and load on first use, so that a process that only
checks requests against a model (the service's `submit`) never pays for torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dinfer_engine.generation_config import GenerationConfig, ResolvedConfig
from dinfer_engine.infill import Infill
from dinfer_engine.models.config import CheckpointError, LLaDAConfig
from dinfer_engine.request import GenerationRequest
from dinfer_engine.result import GenerationResult

if TYPE_CHECKING:  # what __getattr__ loads on first use, for the type checker
    from dinfer_engine.engine import Engine
    from dinfer_engine.models.llada import LLaDAModelLM
    from dinfer_engine.models.llada2 import LLaDA2MoeModelLM
    from dinfer_engine.models.llada_moe import LLaDAMoEModelLM

_ON_FIRST_USE = {"Engine": "dinfer_engine.engine", "LLaDAModelLM": "dinfer_engine.models.llada",
                 "LLaDAMoEModelLM": "dinfer_engine.models.llada_moe",
                 "LLaDA2MoeModelLM": "dinfer_engine.models.llada2"}

__all__ = [
    "CheckpointError",
    "Engine",
    "GenerationConfig",
    "GenerationRequest",
    "GenerationResult",
    "Infill",
    "LLaDA2MoeModelLM",
    "LLaDAConfig",
    "LLaDAMoEModelLM",
    "LLaDAModelLM",
    "ResolvedConfig",
]


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
