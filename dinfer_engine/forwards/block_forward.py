"""One iteration's forwards for block diffusion (LLaDA2): block-causal attention on an
absolute block grid, committed blocks' keys/values computed once and cached.

Every token, prompt included, attends to its own block and the blocks before it, never
later ones. So a block's keys/values depend only on tokens at or before it, and once the
block is complete they never change: they are computed once, by the first forward that
sees the block complete, and read from the cache ever after. Per row and iteration the
forward computes the columns from the first uncached one to the end of the current
block: the whole prompt-and-block on the row's first iteration, the previous block and
the current one right after a block completes (storing the previous block's final
keys/values), and the current block alone otherwise. This equals recomputing the whole
sequence under the block-causal mask every iteration (tested).

Rows whose cache is up to date run together with a span of one block; rows catching up
run in further forwards, grouped by the span they compute (forward.buckets), each row's
span right-aligned to its block's end and the shorter ones filled on the left with
already-cached columns, which are computed but neither written nor attended to.
"""

from __future__ import annotations

import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.forwards.forward import buckets
from dinfer_engine.forwards.smoothing import Smoothing
from dinfer_engine.models.base import DiffusionLM


def block_causal_logits(model: DiffusionLM, batch: RunningBatch, smoothing: Smoothing,
                        hidden: bool = False) -> torch.Tensor:
    """Logits [B, block_length, V] at each row's current block (with `hidden`, the final
    hidden states [B, block_length, d] the head would project instead); afterwards every
    row's blocks before its current one are in the cache. With a prefix cache
    (dinfer_engine/prefix_cache.py), a row's first forward starts after the prompt blocks it
    restores, and of rows sharing uncached prompt blocks one runs first to compute them."""
    block_start = batch.origin + batch.block * batch.block_length  # positions
    logits: torch.Tensor | None = None

    def compute(index: torch.Tensor) -> None:
        nonlocal logits
        part = span_logits(model, batch, index, smoothing, hidden)
        if logits is None:
            logits = part.new_empty(batch.size, *part.shape[1:])
        logits[index] = part

    rest = torch.ones(batch.size, dtype=torch.bool, device=batch.device)
    prefix = batch.prefix
    chains = prefix.first_forwards(batch) if prefix is not None else {}
    if prefix is not None:
        for leaders in prefix.leaders(batch, chains):
            compute(torch.tensor(leaders, device=batch.device))
            rest[leaders] = False
            for row in leaders:
                prefix.keep(batch, row, chains[row])
    catching_up = batch.cached < block_start
    groups = [torch.nonzero(rest & ~catching_up).squeeze(1)]
    late = torch.nonzero(rest & catching_up).squeeze(1)  # grouped by the span each computes
    groups += buckets(late, (block_start + batch.block_length - batch.cached)[late].tolist())
    for index in groups:
        if len(index):
            compute(index)
    if prefix is not None:
        for row, chain in chains.items():
            prefix.keep(batch, row, chain)
    batch.cached = block_start
    batch.nfe += 1
    assert logits is not None  # every row is in one forward
    return logits


def span_logits(model: DiffusionLM, batch: RunningBatch, rows: torch.Tensor,
                smoothing: Smoothing, hidden: bool) -> torch.Tensor:
    device, size = batch.device, batch.block_length
    pad = batch.pad[rows]
    end = pad + batch.origin[rows] + (batch.block[rows] + 1) * size  # column after the block
    first = pad + batch.cached[rows]  # first column not in the cache
    span = int((end - first).max())
    fresh = end[:, None] - span + torch.arange(span, device=device)
    write = fresh >= first[:, None]
    fresh = fresh.clamp(min=0)
    positions = batch.positions(fresh, rows)
    key_positions = torch.arange(batch.width, device=device) - pad[:, None]
    visible = (key_positions >= 0)[:, None, :] & (
        (key_positions // size)[:, None, :] <= (positions // size)[:, :, None])
    out = model(
        batch.ids[rows].gather(1, fresh),
        position_ids=positions,
        attention_mask=visible[:, None],
        cache=batch.cache,
        cache_rows=batch.slot[rows],
        logits_index=torch.arange(span - size, span, device=device).expand(len(rows), -1),
        cache_columns=torch.where(write, fresh, -1),
        return_hidden=hidden,
        inputs_embeds=smoothing.input_embeds(model, batch, rows, fresh),
    )
    return out.hidden if hidden else out.logits
