"""dLLM inference engine: LLaDA, LLaDA-MoE and LLaDA2 models, block diffusion decoding,
KV caches."""

from engine.config import CheckpointError, LLaDAConfig
from engine.engine import Engine
from engine.generation_config import GenerationConfig
from engine.models import LLaDA2MoeModelLM, LLaDAModelLM, LLaDAMoEModelLM
from engine.result import GenerationResult

__all__ = [
    "CheckpointError",
    "Engine",
    "GenerationConfig",
    "GenerationResult",
    "LLaDA2MoeModelLM",
    "LLaDAConfig",
    "LLaDAMoEModelLM",
    "LLaDAModelLM",
]
