"""The canvases of masked diffusion, one object per run of the masked loop
(dinfer_engine/generation.py), covering every row of its batch.

A row of the running batch (dinfer_engine/batch.py) holds its prompt, then its region: what the
canvas says the answer starts as. Its blocks of block_length are decoded one after the
other; at each iteration the decoder (dinfer_engine/decoding/decoders.py) may write masked
positions of the current block (and an editing decoder rewrite tokens it placed there);
the row is done when its last block is, or, with early stop, when the canvas lets it end
at a committed stop token. The canvas also says how a block is predicted (which forwards)
and which cache they keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch

from dinfer_engine.batch import Request, RunningBatch
from dinfer_engine.decoding.decoders import BlockThresholdDecoder, Decoder
from dinfer_engine.decoding.strategies import Strategies
from dinfer_engine.forwards.block_forward import block_causal_logits
from dinfer_engine.forwards.forward import block_logits
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.kv_cache import KVCache
from dinfer_engine.prefix_cache import REUSED, PrefixCache


class MaskCanvas:
    """LLaDA, LLaDA-MoE: a row's region is canvas_length masks after its prompt (gen_length
    rounded up to whole blocks; the answer is cut at gen_length, ADR 059), on blocks
    counted from the prompt's end (the last one may be partial), predicted by bidirectional
    forwards under the cache strategy (dinfer_engine/forwards/forward.py), which keep room in the
    cache for their span forwards. Every row may end early."""

    # decoders this canvas has its own rule for, by name (dinfer_engine/decoding/strategies.py)
    decoders: ClassVar[Mapping[str, type[Decoder]]] = {}

    def __init__(self, config: ResolvedConfig, model: DiffusionLM,
                 prefix: PrefixCache | None = None) -> None:
        """prefix: the engine's prompt prefix cache, which only block diffusion shares."""
        self.config, self.mask_id, self.prefix = config, model.config.mask_token_id, prefix

    def region(self, request: Request) -> list[int]:
        """The tokens a request's region starts as."""
        return [self.mask_id] * self.config.canvas_length

    def row_length(self, request: Request) -> int:
        """Columns a request's row needs: its prompt and region."""
        return len(request.prompt) + len(self.region(request))

    def blocks(self, prompt: torch.Tensor, region: torch.Tensor, length: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For joining rows' prompt, region and row lengths [N]: the position of block 0,
        the first block decoded and one past the last."""
        end = -(-region // self.config.block_length)
        return prompt, torch.zeros_like(prompt), end

    def cache(self, model: DiffusionLM, strategies: Strategies) -> KVCache | None:
        if not strategies.cache.uses_cache:
            return None
        reserve = strategies.cache.reserve(self.config.canvas_length, self.config.block_length)
        return KVCache(model.config.n_layers, reserve)

    def setup(self, batch: RunningBatch) -> None:
        """Register per-row state, before any row joins."""

    def joined(self, batch: RunningBatch, requests: list[Request]) -> None:
        """Called after `requests` joined (the batch's last rows)."""

    def advance(self, batch: RunningBatch) -> None:
        """Called after each iteration has moved rows past their finished blocks."""

    def scheduled(self, batch: RunningBatch, masked: torch.Tensor, counts: torch.Tensor
                  ) -> torch.Tensor:
        """How many tokens a fixed schedule commits in each row at this step, given the
        block's `masked` positions [B, S] and the schedule's `counts` [B] for a block of
        masks."""
        return counts

    def may_end_early(self, batch: RunningBatch) -> torch.Tensor | None:
        """Bool [B]: the rows a committed stop token may end (None: every row)."""
        return None

    def outputs(self, model: DiffusionLM, batch: RunningBatch, strategies: Strategies,
                hidden: bool) -> torch.Tensor:
        """The iteration's logits over each row's block (or the head's input)."""
        return block_logits(model, batch, strategies.cache, strategies.smoothing, hidden)


class BlockCanvas(MaskCanvas):
    """Block diffusion (LLaDA2, LLaDA2.1 with any decoder, editing included): the region
    is masks on an absolute grid counted from the first prompt token, the row rounded up
    to whole blocks (up to block_length - 1 columns past the answer, decoded then
    dropped); the first block decoded is the one holding the prompt's end. Blocks are
    predicted by block-causal forwards (dinfer_engine/forwards/block_forward.py) over a cache of
    committed blocks, shared with other rows through the engine's prefix cache when
    there is one. Its "threshold" decoder is LLaDA2's rule."""

    decoders = {"threshold": BlockThresholdDecoder}

    def row_length(self, request: Request) -> int:
        size = self.config.block_length
        return -(-super().row_length(request) // size) * size

    def blocks(self, prompt: torch.Tensor, region: torch.Tensor, length: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        size = self.config.block_length
        return torch.zeros_like(prompt), prompt // size, length // size

    def cache(self, model: DiffusionLM, strategies: Strategies) -> KVCache:
        return KVCache(model.config.n_layers)  # committed blocks in their own columns

    def setup(self, batch: RunningBatch) -> None:
        if self.prefix is not None:
            batch.prefix = self.prefix
            batch.add_state(REUSED, (), torch.long, report=True)

    def outputs(self, model: DiffusionLM, batch: RunningBatch, strategies: Strategies,
                hidden: bool) -> torch.Tensor:
        return block_causal_logits(model, batch, strategies.smoothing, hidden)
