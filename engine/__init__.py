"""dLLM inference engine: LLaDA-family models, block diffusion decoding, KV caches."""

from engine.config import CheckpointError, LLaDAConfig
from engine.engine import Engine
from engine.generation_config import GenerationConfig
from engine.models import LLaDAModelLM
from engine.result import GenerationResult

__all__ = [
    "CheckpointError",
    "Engine",
    "GenerationConfig",
    "GenerationResult",
    "LLaDAConfig",
    "LLaDAModelLM",
]
