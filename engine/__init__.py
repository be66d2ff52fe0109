"""dLLM inference engine: LLaDA-family models, block diffusion decoding, KV caches."""

from engine.config import CheckpointError, LLaDAConfig
from engine.models import LLaDAModelLM

__all__ = ["CheckpointError", "LLaDAConfig", "LLaDAModelLM"]
