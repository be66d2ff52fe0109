"""What the decoders compute from logits, over a vocabulary split across ranks.

A tensor-parallel rank's logits are its vocabulary slice [..., first:first + count] of
the full logits. The decoders never gather the full rows; each operation here reduces
per-position partial results across ranks (maxima, log-sum-exp, the best index, the
top-k candidates) and returns the same value on every rank, so every rank takes the same
decisions. Without a split (`current()` is None: one rank), each is the plain torch
operation the single-device engine has always used.

loop.run sets the split for the model it drives (`split(model)`); a process can
hold a one-rank engine next to a tensor-parallel one, so the split is a context
variable, not a global."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.parallel.group import Group
from dinfer_engine.parallel.layers import Product, VocabParallelEmbedding
from dinfer_kernels import counter_rng

TOP_P_ROUNDS = 64  # bisection over the bits of a float64 probability in [0, 1]


@dataclass(frozen=True)
class VocabSplit:
    first: int
    count: int
    total: int
    group: Group

    def owns(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(local index, clamped into this slice; whether this rank holds the id)."""
        local = ids - self.first
        inside = (local >= 0) & (local < self.count)
        return torch.where(inside, local, 0), inside


_current: ContextVar[VocabSplit | None] = ContextVar("vocab_split", default=None)


def current() -> VocabSplit | None:
    return _current.get()


@contextmanager
def split(model: DiffusionLM) -> Iterator[None]:
    """The vocabulary split of `model` (none for a one-rank model) while in the block."""
    embedding = model.embedding()
    vocab = None
    if isinstance(embedding, VocabParallelEmbedding):
        group = embedding.group
        vocab = VocabSplit(embedding.first, embedding.num_embeddings,
                           embedding.num_embeddings * group.size, group)
    token = _current.set(vocab)
    try:
        yield
    finally:
        _current.reset(token)


def amax(logits: torch.Tensor) -> torch.Tensor:
    """The largest logit over the whole vocabulary, per position."""
    vocab = current()
    peak = logits.amax(-1)
    return peak if vocab is None else vocab.group.all_reduce(peak, "max")


def logsumexp(logits: torch.Tensor, peak: torch.Tensor | None = None) -> torch.Tensor:
    """log sum exp over the whole vocabulary, per position; `peak`: amax(logits) where
    the caller has it (torch.logsumexp's own steps, so the same bits, one pass fewer)."""
    vocab = current()
    if peak is None:
        if vocab is None:
            return torch.logsumexp(logits, dim=-1)
        peak = amax(logits)
    summed = (logits - peak[..., None]).exp_().sum(-1)
    if vocab is not None:
        summed = vocab.group.all_reduce(summed)
    return peak + torch.log(summed)


def softmax(logits: torch.Tensor) -> torch.Tensor:
    """This rank's part of softmax over the whole vocabulary."""
    if current() is None:
        return torch.softmax(logits, dim=-1)
    return torch.exp(logits - logsumexp(logits)[..., None])


def expected_rows(logits: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """softmax(logits) @ table: the expected row of `table` [vocabulary, d] (this rank's
    rows under tensor parallelism, the partial products summed across ranks)."""
    return weighted_rows(softmax(logits), table)


def weighted_rows(probs: torch.Tensor, table: torch.Tensor,
                  linear: Product = F.linear
                  ) -> torch.Tensor:
    """probs @ table over the whole vocabulary (this rank's probabilities and rows, the
    partial products summed across ranks); `linear`: the product x @ weight.T that
    computes this rank's part (DiffusionGemma's runs on its fixed grid)."""
    vocab = current()
    product = linear(probs.to(table.dtype), table.t())
    return product if vocab is None else vocab.group.all_reduce(product)


def total(values: torch.Tensor) -> torch.Tensor:
    """values summed over the whole vocabulary, per position."""
    vocab = current()
    summed = values.sum(-1)
    return summed if vocab is None else vocab.group.all_reduce(summed)


def full(logits: torch.Tensor) -> torch.Tensor:
    """The whole vocabulary's logits (gathered from every rank), for the few rows that
    need them all (constrained rows: dinfer_engine/decoding/constrained.py)."""
    vocab = current()
    if vocab is None:
        return logits
    return torch.cat(list(vocab.group.all_gather(logits.contiguous())), dim=-1)


def ban(logits: torch.Tensor, token: int) -> None:
    """logits[..., token] = -inf, in place, on the rank that holds it."""
    vocab = current()
    if vocab is None:
        logits[..., token] = -torch.inf
    elif vocab.first <= token < vocab.first + vocab.count:
        logits[..., token - vocab.first] = -torch.inf


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Global token ids of the maxima (the first, by id, on ties)."""
    vocab = current()
    if vocab is None:
        return logits.argmax(-1)
    values, ids = logits.max(-1)
    values, ids = vocab.group.all_gather(values), vocab.group.all_gather(ids + vocab.first)
    best = values.argmax(0, keepdim=True)  # the first rank, so the lowest id, on ties
    return ids.gather(0, best).squeeze(0)


def max_and_argmax(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """amax() and argmax() from one pass over the logits (torch's max over a dimension
    gives the first maximum's index, as argmax does)."""
    vocab = current()
    values, ids = logits.max(-1)
    if vocab is None:
        return values, ids
    values, ids = vocab.group.all_gather(values), vocab.group.all_gather(ids + vocab.first)
    best = values.argmax(0, keepdim=True)  # the first rank, so the lowest id, on ties
    return values.gather(0, best).squeeze(0), ids.gather(0, best).squeeze(0)


def gather(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logits at global token ids [..., k] (or [...] for one id per position)."""
    vocab = current()
    if vocab is None:
        return logits.gather(-1, ids)
    local, inside = vocab.owns(ids)
    values = torch.where(inside, logits.gather(-1, local), 0)
    return vocab.group.all_reduce(values)


def take(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logits at one global token id per position: ids [...] -> [...]."""
    return gather(logits, ids[..., None]).squeeze(-1)


def topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest logits per position and their global ids, largest first."""
    vocab = current()
    if vocab is None:
        return logits.topk(k, dim=-1)
    values, ids = logits.topk(min(k, vocab.count), dim=-1)
    values = torch.cat(list(vocab.group.all_gather(values)), dim=-1)
    ids = torch.cat(list(vocab.group.all_gather(ids + vocab.first)), dim=-1)
    best, where = values.topk(k, dim=-1)
    return best, ids.gather(-1, where)


def scatter_add(logits: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """logits.scatter_add(-1, ids, values) with global ids (out of place)."""
    vocab = current()
    if vocab is None:
        return logits.scatter_add(-1, ids, values)
    local, inside = vocab.owns(ids)
    return logits.scatter_add(-1, local, torch.where(inside, values, 0))


def uniform(shape: torch.Size, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """float64 noise [..., vocabulary slice]: every rank draws the same full-vocabulary
    noise from the request's generator and keeps its slice, so samples do not depend on
    the number of ranks."""
    vocab = current()
    if vocab is None:
        return torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    return own_slice(torch.rand((*shape[:-1], vocab.total), generator=generator,
                                dtype=torch.float64, device=device))


def own_slice(full: torch.Tensor) -> torch.Tensor:
    """This rank's slice [..., first:first + count] of full-vocabulary values."""
    vocab = current()
    return full if vocab is None else full[..., vocab.first:vocab.first + vocab.count]


def head_confidence(hidden: torch.Tensor, weight: torch.Tensor, *, banned: int,
                    temperature: float, seeds: torch.Tensor | None,
                    step: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dinfer_kernels.lm_head_confidence over a vocabulary split across ranks (weight: this
    rank's rows): the maths of its reference, with the same counter-based noise over the
    whole vocabulary, reduced across ranks. Tokens [N] and confidences [N]."""
    vocab = current()
    assert vocab is not None
    logits = hidden.float() @ weight.float().T
    log_normaliser = logsumexp(logits)
    scores = logits.clone()
    if temperature > 0:
        assert seeds is not None
        steps = torch.as_tensor(step, dtype=torch.long, device=hidden.device)
        noise = counter_rng.uniform(seeds, steps.expand(len(hidden)).contiguous(), vocab.total)
        noise = own_slice(noise)
        scores = scores / temperature - torch.log(-torch.log(noise))
    ban(scores, banned)
    tokens = argmax(scores)
    return tokens, torch.exp(take(logits, tokens) - log_normaliser)


def nucleus_floor(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Per position, the smallest probability x such that the tokens more likely than x
    hold less than top_p of the mass: the nucleus is every token with p >= x. Found by
    bisection over the bits of x, each round summing per-rank masses across ranks."""
    vocab = current()
    assert vocab is not None
    ascending = probs.sort(-1).values
    suffix = ascending.flip(-1).cumsum(-1).flip(-1)  # mass at and above each sorted entry
    suffix = torch.cat([suffix, suffix.new_zeros(*suffix.shape[:-1], 1)], dim=-1)
    low = torch.zeros(probs.shape[:-1], dtype=torch.int64, device=probs.device)
    high = torch.full_like(low, int(torch.tensor(1.0, dtype=torch.float64).view(torch.int64)))
    for _ in range(TOP_P_ROUNDS):
        middle = (low + high) // 2
        x = middle.view(torch.float64)
        above = torch.searchsorted(ascending, x[..., None].contiguous(), right=True)
        mass = vocab.group.all_reduce(suffix.gather(-1, above).squeeze(-1))
        fits = mass < top_p
        high = torch.where(fits, middle, high)
        low = torch.where(fits, low, middle + 1)
    return high.view(torch.float64)
