"""The decoding strategies a resolved GenerationConfig asks for, as objects the generation
loop drives without knowing which they are: a decoder (dinfer_engine/decoding/decoders.py), a
cache strategy (dinfer_engine/forwards/forward.py) and an iteration strategy
(dinfer_engine/forwards/smoothing.py), each built from its table in dinfer_engine/choices.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dinfer_engine.batch import RunningBatch
from dinfer_engine.choices import CACHES, DECODERS, SMOOTHING
from dinfer_engine.decoding.constrained import ConstrainedDecoder
from dinfer_engine.decoding.controls import RowControls
from dinfer_engine.decoding.decoders import Decoder
from dinfer_engine.forwards.forward import CacheStrategy
from dinfer_engine.forwards.smoothing import Smoothing
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM


@dataclass(frozen=True)
class Strategies:
    decoder: Decoder
    cache: CacheStrategy  # unused by block diffusion, which caches committed blocks itself
    smoothing: Smoothing
    needs_logits: bool  # the iteration needs the block's logits, not the fused head's choice
    controls: RowControls | None = None  # the rows' sampling controls; None: all neutral

    @classmethod
    def from_config(cls, config: ResolvedConfig,
                    own_decoders: Mapping[str, type[Decoder]] | None = None,
                    constrained: bool = False, controls: RowControls | None = None
                    ) -> Strategies:
        """own_decoders: the run's canvas's own rules for some decoder names (block
        diffusion's "threshold" is LLaDA2's, dinfer_engine/canvas/masked.py). constrained: some
        rows have a constraint, so the decoder is wrapped to honour them
        (dinfer_engine/decoding/constrained.py). controls: the rows' sampling controls
        (dinfer_engine/decoding/controls.py), which change the logits: a run with any
        takes the logits path."""
        cache: CacheStrategy = CACHES[config.cache].load()(config)
        smoothing: Smoothing = SMOOTHING[config.smoothing].load()(config)
        own = (own_decoders or {}).get(config.decoder)
        decoder: Decoder = (own or DECODERS[config.decoder].load())(config)
        if constrained:
            decoder = ConstrainedDecoder(decoder)
        # top_k / top_p sampling and log-probabilities need each position's whole
        # distribution, which the fused LM head never builds
        sampling_needs = config.logprobs or (config.temperature > 0
                                             and (config.top_k > 0 or config.top_p < 1))
        needs_logits = decoder.needs_logits or smoothing.needs_logits or sampling_needs \
            or controls is not None
        return cls(decoder, cache, smoothing, needs_logits, controls)

    def setup(self, model: DiffusionLM, batch: RunningBatch) -> None:
        """Register the per-row state they keep, before any row joins."""
        self.decoder.setup(batch)
        self.smoothing.setup(model, batch)
        if self.controls is not None:
            self.controls.setup(batch)
