"""One denoising iteration's model forwards: logits for every row's current block.

Cache modes (Fast-dLLM semantics). Every row is computed by exactly one forward per
iteration, which counts one to its nfe.

- "none": each iteration runs the full row (prompt + whole answer); nothing is stale.
- "prefix": at a block start (the block's first iteration) the row runs in full, that
  forward's logits are used for the step, and its keys/values of every column are stored.
  The block's later iterations recompute the block and every column after it, and reuse
  the stored keys/values of the columns before the block (prompt and earlier blocks).
  Those cached columns are stale in one way: they were computed while the current block
  was still all masks, so they do not reflect tokens committed in this block since.
- "dual": like "prefix", but later iterations recompute only the current block; the
  columns after it (still masks) also come from the block-start forward, stale with
  respect to this block's commits.
Both caches are refreshed at every block start, by that full forward.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.batch import RunningBatch


def block_logits(model: nn.Module, batch: RunningBatch, cache_mode: str,
                 hidden: bool = False) -> torch.Tensor:
    """Logits [B, block_length, V] at each row's current block columns; with `hidden`,
    the final hidden states [B, block_length, d] that the head would project instead."""
    columns = batch.block_columns()
    if cache_mode == "none":
        full = torch.ones_like(batch.step, dtype=torch.bool)
    else:
        full = batch.step == 0  # block starts refresh the cache
    logits: torch.Tensor | None = None
    for rows, forward in ((full, full_forward), (~full, span_forward)):
        if not rows.any():
            continue
        index = rows.nonzero().squeeze(1)
        part = forward(model, batch, index, columns[index], cache_mode, hidden)
        if logits is None:
            logits = part.new_empty(batch.size, *part.shape[1:])
        logits[index] = part
    batch.nfe += 1
    return logits


def full_forward(model: nn.Module, batch: RunningBatch, rows: torch.Tensor,
                 block_columns: torch.Tensor, cache_mode: str, hidden: bool) -> torch.Tensor:
    """Whole rows; stores every column's keys/values when a cache is in use."""
    columns = torch.arange(batch.width, device=batch.device).expand(len(rows), -1)
    keys_ok = columns >= batch.pad[rows, None]
    out = model(
        batch.ids[rows],
        position_ids=batch.positions(columns, rows),
        attention_mask=keys_ok,
        cache=batch.cache if cache_mode != "none" else None,
        cache_rows=rows,
        store_cache=True,
        logits_index=block_columns,
        return_hidden=hidden,
    )
    return out.hidden if hidden else out.logits


def span_forward(model: nn.Module, batch: RunningBatch, rows: torch.Tensor,
                 block_columns: torch.Tensor, cache_mode: str, hidden: bool) -> torch.Tensor:
    """Only the span each row recomputes: its block ("dual") or its block and everything
    after it ("prefix"); the remaining columns come from the cache."""
    width, start = batch.width, block_columns[:, 0]
    span = batch.block_length if cache_mode == "dual" else int((width - start).max())
    fresh = start[:, None] + torch.arange(span, device=batch.device)
    fresh_ok = fresh < width  # prefix spans of rows at later blocks run past the end
    fresh = fresh.clamp(max=width - 1)
    cached = torch.arange(width, device=batch.device).expand(len(rows), -1)
    recomputed = (cached >= start[:, None]) & (cached < start[:, None] + span)
    cached_ok = (cached >= batch.pad[rows, None]) & ~recomputed
    local = torch.arange(batch.block_length, device=batch.device).expand(len(rows), -1)
    out = model(
        batch.ids[rows].gather(1, fresh),
        position_ids=batch.positions(fresh, rows),
        attention_mask=torch.cat([cached_ok, fresh_ok], dim=1),
        cache=batch.cache,
        cache_rows=rows,
        store_cache=False,
        logits_index=local,
        return_hidden=hidden,
    )
    return out.hidden if hidden else out.logits
