"""Model families, keyed by config.json's `model_type`."""

from engine.models.llada import LLaDAModelLM

MODEL_TYPES = {"llada": LLaDAModelLM}

__all__ = ["MODEL_TYPES", "LLaDAModelLM"]
