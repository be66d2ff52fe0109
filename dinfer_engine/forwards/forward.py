"""One denoising iteration's model forwards: logits for every row's current block.

Every row is computed by exactly one forward per iteration, which counts one to its nfe:
either a *full* forward of the whole row, or a *span* forward that recomputes a window of
columns around the block and reads every other column's keys/values from the cache. A
cache strategy (the objects below, Fast-dLLM's modes and dInfer's vicinity refresh)
decides which rows run in full and which window the others recompute. Full forwards store
every column's keys/values when a cache is in use; span forwards never store (their fresh
keys/values go to the cache's reserve columns, ADR 014), so what they recompute serves
that forward only. Full forwards run in length buckets (`buckets`). Cached columns are
stale in one way: they were computed at the row's last full forward, before the tokens
committed since.
"""

from __future__ import annotations

import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.forwards.smoothing import Smoothing
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM

LENGTH_SHARE = 0.75  # of a group's longest row: the shortest row a full forward pads to it


class NoCache:
    """"none": every iteration runs the full row (prompt + whole answer); nothing is stale."""

    uses_cache = False

    def __init__(self, config: ResolvedConfig) -> None:
        """Built from the config as every strategy (dinfer_engine/choices.py); reads none of it."""

    def reserve(self, gen_length: int, block_length: int) -> int:
        """The widest span a span forward computes (KV cache columns kept for it)."""
        return 0

    def full_rows(self, batch: RunningBatch) -> torch.Tensor:
        return torch.ones_like(batch.step, dtype=torch.bool)


class PrefixCache:
    """"prefix": a row runs in full at its block's first iteration (refreshing the cache);
    later iterations recompute the block and every column after it and reuse the cached
    columns before the block (prompt and earlier blocks)."""

    uses_cache = True

    def __init__(self, config: ResolvedConfig) -> None:
        """Built from the config as every strategy (dinfer_engine/choices.py); reads none of it."""

    def reserve(self, gen_length: int, block_length: int) -> int:
        return gen_length

    def full_rows(self, batch: RunningBatch) -> torch.Tensor:
        return batch.step == 0

    def window(self, batch: RunningBatch, start: torch.Tensor) -> tuple[int, int]:
        """(columns recomputed before the block, window length)."""
        return 0, int((batch.width - start).max())


class DualCache(PrefixCache):
    """"dual": like "prefix", but later iterations recompute only the current block; the
    columns after it (still masks) also come from the block-start forward."""

    def reserve(self, gen_length: int, block_length: int) -> int:
        return block_length

    def window(self, batch: RunningBatch, start: torch.Tensor) -> tuple[int, int]:
        return 0, batch.block_length


class VicinityCache(DualCache):
    """"vicinity" (dInfer's vicinity refresh of the dual cache): a row's first
    `warmup_steps` iterations run in full, as does every block's first iteration; the
    others recompute the block plus `prefix_look` columns before it and `after_look` after
    it (clipped to the row), so the block attends to fresh keys/values of its neighbours.
    With both looks 0 and no warm-up it is exactly "dual"."""

    def __init__(self, config: ResolvedConfig) -> None:
        self.prefix_look, self.after_look = config.prefix_look, config.after_look
        self.warmup_steps = config.warmup_steps

    def reserve(self, gen_length: int, block_length: int) -> int:
        return self.prefix_look + block_length + self.after_look

    def full_rows(self, batch: RunningBatch) -> torch.Tensor:
        return (batch.step == 0) | (batch.nfe < self.warmup_steps)

    def window(self, batch: RunningBatch, start: torch.Tensor) -> tuple[int, int]:
        return self.prefix_look, self.prefix_look + batch.block_length + self.after_look


CacheStrategy = NoCache | PrefixCache | DualCache | VicinityCache


def block_logits(model: DiffusionLM, batch: RunningBatch, cache: CacheStrategy,
                 smoothing: Smoothing, hidden: bool = False) -> torch.Tensor:
    """Logits [B, block_length, V] at each row's current block columns; with `hidden`,
    the final hidden states [B, block_length, d] that the head would project instead."""
    columns = batch.block_columns()
    full = cache.full_rows(batch)
    full_index = torch.nonzero(full).squeeze(1)
    lengths = (batch.width - batch.pad[full_index]).tolist()
    parts = [(index, full_forward(model, batch, index, columns[index], cache, smoothing, hidden))
             for index in buckets(full_index, lengths)]
    if not full.all():
        assert isinstance(cache, PrefixCache)  # "none" runs every row in full
        index = torch.nonzero(~full).squeeze(1)
        parts.append((index, span_forward(model, batch, index, columns[index], cache,
                                          smoothing, hidden)))
    first = parts[0][1]
    if len(parts) == 1 and len(first) == batch.size:  # every row, in order: no copy
        batch.nfe += 1
        return first
    logits = first.new_empty(batch.size, *first.shape[1:])
    for index, part in parts:
        logits[index] = part
    batch.nfe += 1
    return logits


def buckets(index: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """Rows `index` grouped for forwards whose rows are padded to the group's largest
    size (columns computed): a row joins a group while its size is at least LENGTH_SHARE
    of the group's largest, so one long prompt widens only rows of about its length, not
    the whole batch. Groups keep the rows' order."""
    groups: list[list[int]] = []
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if groups and sizes[i] >= LENGTH_SHARE * sizes[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [index[sorted(group)] for group in groups]


def full_forward(model: DiffusionLM, batch: RunningBatch, rows: torch.Tensor,
                 block_columns: torch.Tensor, cache: CacheStrategy,
                 smoothing: Smoothing, hidden: bool) -> torch.Tensor:
    """Whole rows, from the first column of the longest of them (the rest is padding in
    every one), or of a block reaching into the padding (a canvas shorter than a block);
    stores those columns' keys/values when a cache is in use."""
    first = min(int(batch.pad[rows].min()), int(block_columns[:, 0].min()))
    columns = torch.arange(first, batch.width, device=batch.device).expand(len(rows), -1)
    keys_ok = columns >= batch.pad[rows, None]
    out = model(
        batch.ids[rows, first:],
        position_ids=batch.positions(columns, rows),
        attention_mask=keys_ok,
        cache=batch.cache if cache.uses_cache else None,
        cache_rows=batch.slot[rows],
        store_cache=True,
        logits_index=block_columns - first,
        inputs_embeds=smoothing.input_embeds(model, batch, rows, columns),
        return_hidden=hidden,
    )
    return out.hidden if hidden else out.logits


def span_forward(model: DiffusionLM, batch: RunningBatch, rows: torch.Tensor,
                 block_columns: torch.Tensor, cache: PrefixCache,
                 smoothing: Smoothing, hidden: bool) -> torch.Tensor:
    """Only the window each row recomputes; the remaining columns come from the cache.
    Window columns outside the row (before its prompt, past its end) are computed but
    masked out as keys, and their outputs are not used."""
    width, start = batch.width, block_columns[:, 0]
    before, span = cache.window(batch, start)
    first = start - before
    fresh = first[:, None] + torch.arange(span, device=batch.device)
    fresh_ok = (fresh >= batch.pad[rows, None]) & (fresh < width)
    fresh = fresh.clamp(min=0, max=width - 1)
    cached = torch.arange(width, device=batch.device).expand(len(rows), -1)
    recomputed = (cached >= first[:, None]) & (cached < first[:, None] + span)
    cached_ok = (cached >= batch.pad[rows, None]) & ~recomputed
    local = before + torch.arange(batch.block_length, device=batch.device).expand(len(rows), -1)
    out = model(
        batch.ids[rows].gather(1, fresh),
        position_ids=batch.positions(fresh, rows),
        attention_mask=torch.cat([cached_ok, fresh_ok], dim=1),
        cache=batch.cache,
        cache_rows=batch.slot[rows],
        store_cache=False,
        logits_index=local,
        inputs_embeds=smoothing.input_embeds(model, batch, rows, fresh),
        return_hidden=hidden,
    )
    return out.hidden if hidden else out.logits
