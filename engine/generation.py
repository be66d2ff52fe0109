"""The iteration loop with continuous batching.

Prompts wait in a queue sorted longest first (so the width only shrinks as the run goes
on). Before every iteration, waiting prompts join while the batch has fewer than
max_batch_size rows and rows x width stays within max_batch_tokens (one row always runs).
Each iteration predicts every row's current block, commits tokens chosen by the decoder,
moves rows whose block has no masks left to their next block, and takes out rows that are
finished: all blocks done, or (early_stop) a stop token is committed with no mask before
it, in which case the rest of the answer becomes EOS without further forwards.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch
from torch import nn

from engine.batch import FinishedRow, Request, RunningBatch
from engine.forward import block_logits
from engine.generation_config import GenerationConfig
from engine.kv_cache import KVCache
from engine.strategies import Strategies


@torch.inference_mode()
def run(model: nn.Module, requests: list[Request], config: GenerationConfig,
        stop_ids: list[int], on_finish: Callable[[FinishedRow], None]) -> None:
    """Decode every request; `config` is resolved. Calls on_finish as each row finishes."""
    model_cfg = model.config
    device = next(model.parameters()).device
    strategies = Strategies.from_config(config)
    cache = KVCache(model_cfg.n_layers) if strategies.cache.uses_cache else None
    batch = RunningBatch(config.gen_length, config.block_length, model_cfg.mask_token_id,
                         model_cfg.pad_token_id, device, cache)
    strategies.setup(model, batch)
    waiting = deque(sorted(requests, key=lambda r: -len(r.prompt)))
    stops = torch.tensor(stop_ids, device=device)
    while waiting or batch.size:
        admit(batch, waiting, config)
        step(model, batch, strategies)
        finished = batch.block == config.num_blocks
        if config.early_stop:
            finished |= end_answers(batch, stops, model_cfg.eos_token_id)
        if finished.any():
            for row in batch.remove(finished):
                on_finish(row)


def admit(batch: RunningBatch, waiting: deque[Request], config: GenerationConfig) -> None:
    joining: list[Request] = []
    width = batch.width if batch.size else 0
    while waiting and batch.size + len(joining) < config.max_batch_size:
        new_width = max(width, len(waiting[0].prompt) + config.gen_length)
        rows = batch.size + len(joining) + 1
        if rows > 1 and rows * new_width > config.max_batch_tokens:
            break
        joining.append(waiting.popleft())
        width = new_width
    batch.add(joining)


def step(model: nn.Module, batch: RunningBatch, strategies: Strategies) -> None:
    """One iteration: predict each row's block, commit the decoder's choice, advance."""
    iteration = batch.nfe.clone()  # per request, counted from 0
    logits = block_logits(model, batch, strategies.cache, strategies.smoothing)
    columns = batch.block_columns()
    current = batch.ids.gather(1, columns)
    masked = current == batch.mask_id
    threshold = strategies.smoothing.threshold(iteration)
    tokens, commit = strategies.decoder.choose(logits, masked, threshold, batch)
    batch.ids.scatter_(1, columns, torch.where(commit, tokens, current))
    strategies.smoothing.update(model, batch, logits, masked & ~commit, iteration)
    block_done = ~(masked & ~commit).any(-1)
    batch.block += block_done
    batch.step = torch.where(block_done, 0, batch.step + 1)


def end_answers(batch: RunningBatch, stops: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Rows whose answer has ended: a committed stop token with no mask before it. Their
    remaining columns are set to EOS. Returns the bool [B] of ended rows."""
    answers = batch.answers()
    length = answers.shape[1]
    index = torch.arange(length, device=answers.device)
    first_stop = torch.where(torch.isin(answers, stops), index, length).min(-1).values
    first_mask = torch.where(answers == batch.mask_id, index, length).min(-1).values
    ended = first_stop < first_mask
    after = ended[:, None] & (index > first_stop[:, None])
    answers.masked_fill_(after, eos_id)  # a view: writes into batch.ids
    return ended
