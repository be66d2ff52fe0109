"""One iteration's model output over each row's current block, for the decoder.

Two paths with the same maths (dinfer_kernels/backend.py chooses, by the engine's `kernels`):
- torch: the model returns the block's logits [B, block, V] and the decoder reads them
  (decoders.sample, in float64);
- triton: the model returns the block's final hidden states and the fused LM head
  (dinfer_kernels.lm_head_confidence) projects only the masked positions, keeping one vocabulary
  tile at a time instead of the logits and their float64 copy, and picks the tokens.

Greedy decoding picks the same tokens on both (the argmax, first index on ties, never
the mask token). Sampling does not draw the same noise: the torch path uses each
request's torch.Generator, the kernel a counter-based hash keyed by (request seed and
the token's position, the row's forward count, token) (dinfer_kernels/counter_rng.py). Both are
Gumbel-max samples of softmax(logits / temperature), reproducible for a given seed and
independent of batch mates, but the samples differ between the paths, and so between a
GPU run (kernels) and a CPU run (torch). Iterations that need the logits themselves
(Strategies.needs_logits: the credit decoder, iteration smoothing, top_k / top_p
sampling, log-probabilities) always take the torch path.
"""

from __future__ import annotations

from typing import Protocol

import torch

from dinfer_engine.batch import Request, RunningBatch
from dinfer_engine.decoding.decoders import Prediction
from dinfer_engine.decoding.strategies import Strategies
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.parallel import vocab
from dinfer_kernels import lm_head_confidence, use_triton
from dinfer_kernels.counter_rng import position_seeds


class Forwards(Protocol):
    """How a run predicts its blocks: the run's canvas (dinfer_engine/canvas/masked.py)."""

    def outputs(self, model: DiffusionLM, batch: RunningBatch, strategies: Strategies,
                hidden: bool) -> torch.Tensor: ...


def predict_block(model: DiffusionLM, batch: RunningBatch, config: ResolvedConfig,
                  strategies: Strategies, forwards: Forwards) -> Prediction:
    """The block's logits (changed by the rows' sampling controls, when a row has any:
    dinfer_engine/decoding/controls.py), or the fused head's tokens [B, block_length] and
    confidence [B, block_length] (the probability of each token under softmax(logits),
    -inf at columns the decoder does not read: Decoder.predicted_positions)."""
    if not use_triton(batch.device) or strategies.needs_logits:
        logits = forwards.outputs(model, batch, strategies, hidden=False)
        if strategies.controls is not None:  # the rows' sampling controls, in place
            strategies.controls.apply(logits, batch)
        return Prediction(logits=logits)
    columns = batch.block_columns()
    current = batch.ids.gather(1, columns)
    # the positions the decoder reads: the masked ones, or more for one that edits
    predicted = strategies.decoder.predicted_positions(current == batch.mask_id, batch)
    hidden = forwards.outputs(model, batch, strategies, hidden=True)
    seeds: torch.Tensor | None = None
    steps: torch.Tensor | int = 0
    if config.temperature > 0:  # every request has its generator then
        request_seeds = torch.tensor([_int64(_generator(r).initial_seed())
                                      for r in batch.requests], device=batch.device)
        every_row = torch.arange(batch.size, device=batch.device)
        positions = batch.positions(columns, every_row)  # in the sequence, padding aside
        seeds = position_seeds(request_seeds, positions)[predicted]
        steps = batch.nfe[:, None].expand_as(columns)[predicted]
    # the kernel would see one rank's vocabulary: tensor parallelism runs its maths reduced
    # across ranks, with the same noise, so samples match a one-rank engine's
    head = lm_head_confidence if vocab.current() is None else vocab.head_confidence
    chosen, chosen_confidence = head(
        hidden[predicted], model.head_weight(), banned=batch.mask_id,
        temperature=config.temperature, seeds=seeds, step=steps)
    tokens = current.masked_scatter(predicted, chosen)
    confidence = torch.full(current.shape, -torch.inf, device=batch.device)
    confidence = confidence.masked_scatter(predicted, chosen_confidence)
    return Prediction(tokens=tokens, confidence=confidence, hidden=hidden,
                      head=model.head_weight())


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, banned: int, top: int
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Each position's log-probability of `tokens` [B, S] under the untouched softmax, and
    the `top` most likely tokens (never `banned`, the mask, which is never predicted)
    with their log-probabilities ([B, S, top] ids and values; None when top is 0)."""
    scores = logits.to(torch.float64, copy=True)
    normaliser = vocab.logsumexp(scores)[..., None]
    chosen = vocab.take(scores, tokens) - normaliser.squeeze(-1)
    if not top:
        return chosen, None, None
    vocab.ban(scores, banned)
    values, ids = vocab.topk(scores, top)
    return chosen, ids, values - normaliser


def _int64(seed: int) -> int:
    """A torch generator's uint64 seed as the int64 with the same bits."""
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def _generator(request: Request) -> torch.Generator:
    if request.generator is None:
        raise RuntimeError("a sampled request has no generator")
    return request.generator
