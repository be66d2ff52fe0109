"""The masked-diffusion loop with continuous batching (LLaDA, LLaDA-MoE, LLaDA2, LLaDA2.1;
infill rows), one implementation of the loop contract (dinfer_engine/loop.py).

Rows wait longest first (so the width only shrinks as the run goes on). Before every
iteration, waiting rows join while the batch has fewer than max_batch_size rows,
rows x width stays within max_batch_tokens and the constrained rows' documented bytes
within constraint_memory_mb (dinfer_engine/row_budget.py; one row always runs).
Each iteration predicts every row's current block, commits tokens chosen by the decoder,
moves rows whose block is done (the decoder says: no mask left, or for the editing decoder
also no edit or post-step left) to their next block, and takes out rows that are
finished: all blocks done, or (early_stop) a stop token is committed with no mask before
it (nor a token the decoder may still edit), in which case the rest of the answer becomes
EOS without further forwards.

The run's canvas (dinfer_engine/canvas/masked.py: masks, infill canvases, block diffusion's
absolute grid) says what each row's region starts as, where its blocks lie, how they are
predicted, and which rows may end early; the loop does not know which it is.
"""

from __future__ import annotations

from collections import deque

import torch

from dinfer_engine.batch import FinishedRow, Layout, Request, RunningBatch
from dinfer_engine.canvas.masked import MaskCanvas
from dinfer_engine.canvas.run_canvas import canvas_for, sampled
from dinfer_engine.decoding.controls import RowControls
from dinfer_engine.decoding.prediction import predict_block, token_logprobs
from dinfer_engine.decoding.strategies import Strategies
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.prefix_cache import PrefixCache
from dinfer_engine.row_budget import RowBudget, joiners


class MaskedLoop:
    """One run of the masked loop: its canvas, strategies and running batch."""

    def __init__(self, model: DiffusionLM, requests: list[Request], config: ResolvedConfig,
                 stop_ids: list[int], prefix: PrefixCache | None = None) -> None:
        self.model, self.config = model, config
        device = next(model.parameters()).device
        self.canvas: MaskCanvas = canvas_for(model, requests, config, prefix)
        self.strategies = Strategies.from_config(
            config, self.canvas.decoders, any(r.constraint is not None for r in requests),
            RowControls.of(requests, stop_ids))
        layout = Layout(config.canvas_length, config.block_length, model.config.mask_token_id,
                        model.config.pad_token_id, device,
                        config.top_logprobs if config.logprobs else None,
                        max((len(self.canvas.region(r)) for r in requests), default=0))
        self.batch = RunningBatch(layout, self.canvas.cache(model, self.strategies),
                                  self.canvas)
        self.canvas.setup(self.batch)
        self.strategies.setup(model, self.batch)
        self.stops = torch.tensor(stop_ids, device=device)
        self.budget = RowBudget.of(model, config)
        self.sampled = sampled(model, config)

    @property
    def running(self) -> int:
        return self.batch.size

    def admit(self, waiting: deque[Request]) -> None:
        admit(self.batch, waiting, self.config, self.budget, self.sampled)

    def step(self) -> list[FinishedRow]:
        batch = self.batch
        step(self.model, batch, self.config, self.strategies, self.canvas)
        finished = batch.done()
        if self.config.early_stop:
            finished |= end_answers(batch, self.stops, self.model.config.eos_token_id,
                                    self.strategies.decoder.editable_from(batch),
                                    self.canvas.may_end_early(batch))
        return batch.remove(finished) if finished.any() else []


def admit(batch: RunningBatch, waiting: deque[Request], config: ResolvedConfig,
          budget: RowBudget, sampled: bool) -> None:
    """Add the waiting rows that fit (row_budget.joiners); a row is as wide as its canvas,
    a block at least. Each is started, its generator seeded when the run samples."""
    joining = joiners(waiting, batch.requests, batch.width if batch.size else 0,
                      lambda request: max(batch.canvas.row_length(request),
                                          config.block_length),
                      config, budget)
    for request in joining:
        request.start(batch.device, sampled)
    batch.add(joining)


def step(model: DiffusionLM, batch: RunningBatch, config: ResolvedConfig,
         strategies: Strategies, canvas: MaskCanvas) -> None:
    """One iteration: predict each row's block, commit the decoder's choice, advance."""
    iteration = batch.nfe.clone()  # per request, counted from 0
    prediction = predict_block(model, batch, config, strategies, canvas)
    columns = batch.block_columns()
    current = batch.ids.gather(1, columns)
    masked = current == batch.mask_id
    threshold = strategies.smoothing.threshold(iteration)
    tokens, commit = strategies.decoder.choose(prediction, masked, threshold, batch)
    if batch.logprobs is not None:  # the model's log-probability of each committed token
        answer_columns = columns - (batch.pad + batch.prompt_length)[:, None]
        batch.logprobs.record(answer_columns, commit, *token_logprobs(
            prediction.require_logits(), tokens, batch.mask_id, config.top_logprobs))
    batch.ids.scatter_(1, columns, torch.where(commit, tokens, current))
    # a smoothing that updates from the logits asks for them (needs_logits), so it gets them
    strategies.smoothing.update(model, batch, prediction.logits,
                                masked & ~commit, iteration)
    block_done = strategies.decoder.block_done(masked, commit, batch)
    batch.block += block_done
    batch.step = torch.where(block_done, 0, batch.step + 1)
    canvas.advance(batch)


def end_answers(batch: RunningBatch, stops: torch.Tensor, eos_id: int,
                editable_from: torch.Tensor | None = None,
                may_end: torch.Tensor | None = None) -> torch.Tensor:
    """Rows whose answer has ended: a committed stop token with no mask before it (nor
    any answer index at or past `editable_from` [B], where a decoder may still rewrite
    tokens), among the rows `may_end` [B] (None: all). Their remaining columns are set to
    EOS. Returns the bool [B] of ended rows."""
    columns = batch.answer_columns()
    answers = batch.ids.gather(1, columns)
    length = answers.shape[1]
    index = torch.arange(length, device=answers.device)
    first_stop = torch.where(torch.isin(answers, stops), index, length).min(-1).values
    first_mask = torch.where(answers == batch.mask_id, index, length).min(-1).values
    if editable_from is not None:
        first_mask = torch.minimum(first_mask, editable_from)
    ended = first_stop < first_mask
    if may_end is not None:
        ended &= may_end
    after = ended[:, None] & (index > first_stop[:, None])
    batch.ids.scatter_(1, columns, answers.masked_fill(after, eos_id))
    return ended
