"""The decoding strategies a resolved GenerationConfig asks for, as objects the generation
loop drives without knowing which they are: a decoder (engine/decoders.py), a cache
strategy (engine/forward.py) and an iteration strategy (engine/smoothing.py)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from engine.batch import RunningBatch
from engine.decoders import DECODER_TYPES, Decoder
from engine.forward import CacheStrategy, DualCache, NoCache, PrefixCache, VicinityCache
from engine.generation_config import GenerationConfig
from engine.smoothing import IterationSmoothing, NoSmoothing, Smoothing


@dataclass(frozen=True)
class Strategies:
    decoder: Decoder
    cache: CacheStrategy
    smoothing: Smoothing

    @classmethod
    def from_config(cls, config: GenerationConfig) -> Strategies:
        caches = {"none": NoCache, "prefix": PrefixCache, "dual": DualCache}
        if config.cache == "vicinity":
            cache = VicinityCache(config.prefix_look, config.after_look, config.warmup_steps)
        else:
            cache = caches[config.cache]()
        if config.smoothing:
            smoothing = IterationSmoothing(config.threshold, config.cont_weight)
        else:
            smoothing = NoSmoothing(config.threshold)
        return cls(DECODER_TYPES[config.decoder](config), cache, smoothing)

    def setup(self, model: nn.Module, batch: RunningBatch) -> None:
        """Register the per-row state they keep, before any row joins."""
        self.decoder.setup(batch)
        self.smoothing.setup(model, batch)
