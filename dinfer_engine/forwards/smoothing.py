"""Iteration strategies: what a forward is fed at still-masked positions, and the
confidence threshold each iteration hands the decoder."""

from __future__ import annotations

import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.parallel import vocab


class NoSmoothing:
    """Masked positions are fed the mask token's embedding (the model embeds the ids
    itself); every iteration uses the configured threshold."""

    needs_logits = False  # update() reads no logits

    def __init__(self, config: ResolvedConfig) -> None:
        self.base_threshold = config.threshold

    def setup(self, model: DiffusionLM, batch: RunningBatch) -> None:
        pass

    def input_embeds(self, model: DiffusionLM, batch: RunningBatch, rows: torch.Tensor,
                     columns: torch.Tensor) -> torch.Tensor | None:
        return None

    def threshold(self, iteration: torch.Tensor) -> torch.Tensor:
        """Float64 [B] threshold for rows at per-request `iteration` (0 = first forward)."""
        return torch.full(iteration.shape, self.base_threshold, dtype=torch.float64,
                          device=iteration.device)

    def update(self, model: DiffusionLM, batch: RunningBatch, logits: torch.Tensor | None,
               still_masked: torch.Tensor, iteration: torch.Tensor) -> None:
        pass


class IterationSmoothing(NoSmoothing):
    """dInfer's iteration smoothing. After a row's iteration i (counted per request from 0),
    each position of its block that is still masked is fed, at later forwards,
    E[mask] + w_i * softmax(logits) @ E instead of E[mask], with the logits of iteration i,
    E the input embedding matrix and w_i = min(0.15 + 0.02 i, cont_weight). The threshold
    of iteration i is max(1 - 0.02 i, threshold): annealed from 1.0 to the configured one.
    Positions the row has not yet predicted (later blocks) keep E[mask]. The soft part is
    row state; committed positions are fed their token's embedding as usual."""

    STATE = "smoothing"
    needs_logits = True

    def __init__(self, config: ResolvedConfig) -> None:
        super().__init__(config)
        self.cont_weight = config.cont_weight

    def setup(self, model: DiffusionLM, batch: RunningBatch) -> None:
        dim = model.embedding().weight.shape[1]
        margin = batch.block_length  # a block may start before the answer or end after it
        batch.add_state(self.STATE, (batch.region_limit + 2 * margin, dim), torch.float32)

    def slots(self, batch: RunningBatch, rows: torch.Tensor,
              columns: torch.Tensor) -> torch.Tensor:
        """The state's slot of each column [R, S]: its index in the answer plus one block's
        margin (block diffusion's absolute grid puts blocks across the answer's ends)."""
        answer_start = batch.pad[rows] + batch.prompt_length[rows]
        return columns - answer_start[:, None] + batch.block_length

    def input_embeds(self, model: DiffusionLM, batch: RunningBatch, rows: torch.Tensor,
                     columns: torch.Tensor) -> torch.Tensor:
        ids = batch.ids[rows].gather(1, columns)
        embeds = model.embedding()(ids)
        state = batch.state[self.STATE][rows]
        slots = self.slots(batch, rows, columns)
        inside = (slots >= 0) & (slots < state.shape[1])
        soft = state.gather(1, slots.clamp(0, state.shape[1] - 1)[..., None].expand(
            -1, -1, embeds.shape[-1]))
        fed = (inside & (ids == batch.mask_id))[..., None]
        return embeds + torch.where(fed, soft, 0).to(embeds.dtype)

    def threshold(self, iteration: torch.Tensor) -> torch.Tensor:
        annealed = 1 - 0.02 * iteration.to(torch.float64)
        return annealed.clamp(min=self.base_threshold)

    def update(self, model: DiffusionLM, batch: RunningBatch, logits: torch.Tensor | None,
               still_masked: torch.Tensor, iteration: torch.Tensor) -> None:
        """Called after iteration `iteration` committed; logits [B, block_length, V] are
        that iteration's, at the (not yet advanced) current blocks."""
        assert logits is not None, "smoothing declares needs_logits"
        weight = (0.15 + 0.02 * iteration.to(torch.float32)).clamp(max=self.cont_weight)
        table = model.embedding().weight.float()
        soft = vocab.expected_rows(logits.float(), table)
        soft = torch.where(still_masked[..., None], weight[:, None, None] * soft, 0)
        every_row = torch.arange(batch.size, device=batch.device)
        index = self.slots(batch, every_row, batch.block_columns())
        state = batch.state[self.STATE]
        state.scatter_(1, index[..., None].expand(-1, -1, state.shape[-1]), soft)


Smoothing = NoSmoothing | IterationSmoothing
