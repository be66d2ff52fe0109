"""Each row's predicted tokens and their confidence over its current block.

Two paths with the same maths (kernels/backend.py chooses, DINFER_BATCH_KERNELS):
- torch: the model returns the block's logits [B, block, V] and decoders.sample reads
  them in float64;
- triton: the model returns the block's final hidden states and the fused LM head
  (kernels.lm_head_confidence) projects only the masked positions, keeping one vocabulary
  tile at a time instead of the logits and their float64 copy.

Greedy decoding picks the same tokens on both (the argmax, first index on ties, never
the mask token). Sampling does not draw the same noise: the torch path uses each
request's torch.Generator, the kernel a counter-based hash keyed by (request seed and
the token's position, the row's forward count, token) (kernels/counter_rng.py). Both are
Gumbel-max samples of softmax(logits / temperature), reproducible for a given seed and
independent of batch mates, but the samples differ between the paths, and so between a
GPU run (kernels) and a CPU run (torch). top_k / top_p sampling and log-probabilities
always take the torch path (needs_logits).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.batch import RunningBatch
from engine.block_forward import block_causal_logits
from engine.decoders import sample
from engine.forward import block_logits
from engine.generation_config import GenerationConfig
from kernels import lm_head_confidence, use_triton
from kernels.counter_rng import position_seeds

Alternatives = tuple[torch.Tensor, torch.Tensor]


def predict_block(model: nn.Module, batch: RunningBatch, config: GenerationConfig
                  ) -> tuple[torch.Tensor, torch.Tensor, Alternatives | None]:
    """tokens [B, block_length] and confidence [B, block_length]: the probability of each
    token under softmax(logits), -inf at columns that are no longer masks; and, when
    top_logprobs are asked for, the most likely tokens of each column with their
    log-probabilities ([B, block_length, top_logprobs] ids and values)."""
    columns = batch.block_columns()
    current = batch.ids.gather(1, columns)
    masked = current == batch.mask_id
    if not use_triton(batch.device) or needs_logits(config):
        logits = block_outputs(model, batch, config, hidden=False)
        tokens, confidence = sample(logits, config.temperature,
                                    [r.generator for r in batch.requests], batch.mask_id,
                                    config.top_k, config.top_p)
        top = (most_likely(logits, batch.mask_id, config.top_logprobs)
               if config.logprobs and config.top_logprobs else None)
        return tokens, torch.where(masked, confidence, -torch.inf), top
    hidden = block_outputs(model, batch, config, hidden=True)
    seeds, steps = None, 0
    if config.temperature > 0:
        request_seeds = torch.tensor([_int64(r.generator.initial_seed()) for r in batch.requests],
                                     device=batch.device)
        every_row = torch.arange(batch.size, device=batch.device)
        positions = batch.positions(columns, every_row)  # in the sequence, padding aside
        seeds = position_seeds(request_seeds, positions)[masked]
        steps = batch.nfe[:, None].expand_as(columns)[masked]
    chosen, chosen_confidence = lm_head_confidence(
        hidden[masked], model.head_weight(), banned=batch.mask_id,
        temperature=config.temperature, seeds=seeds, step=steps)
    tokens = current.masked_scatter(masked, chosen)
    confidence = torch.full(current.shape, -torch.inf, device=batch.device)
    return tokens, confidence.masked_scatter(masked, chosen_confidence), None


def needs_logits(config: GenerationConfig) -> bool:
    """top_k / top_p sampling and log-probabilities need each position's whole
    distribution, which the fused LM head never builds: those requests take the torch
    path."""
    return config.logprobs or (config.temperature > 0
                               and (config.top_k > 0 or config.top_p < 1))


def most_likely(logits: torch.Tensor, banned: int, top: int) -> Alternatives:
    """The `top` most likely tokens of each position (never `banned`, the mask, which is
    never predicted) and their log-probabilities under the untouched softmax."""
    scores = logits.to(torch.float64)
    normaliser = torch.logsumexp(scores, dim=-1, keepdim=True)
    scores[..., banned] = -torch.inf
    values, ids = scores.topk(top, dim=-1)
    return ids, values - normaliser


def block_outputs(model: nn.Module, batch: RunningBatch, config: GenerationConfig,
                  hidden: bool) -> torch.Tensor:
    """The family's forwards for this iteration (engine/forward.py, or
    engine/block_forward.py for block diffusion): logits, or the head's input."""
    if model.block_causal:
        return block_causal_logits(model, batch, hidden)
    return block_logits(model, batch, config.cache, hidden)


def _int64(seed: int) -> int:
    """A torch generator's uint64 seed as the int64 with the same bits."""
    return seed - (1 << 64) if seed >= 1 << 63 else seed
