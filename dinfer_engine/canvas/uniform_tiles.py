"""A DiffusionGemma step's work per position over the vocabulary, a few positions at a
time (docs/adr/050-step-in-cache.md): the temperature, the maximum and argmax, the
subnormal floor, the softmax, the logsumexp and the entropy. Each is the reference's
operation over one position's whole vocabulary, so running it over a tile of positions
instead of the whole slice moves no bit; on a CPU a tile stays in cache through the
whole chain, where the slice-wide operations each read and wrote the slice from memory.
A tile has two positions at least: torch splits a reduction with one output across
threads along the vocabulary, which rounds otherwise."""

from __future__ import annotations

import math

import torch

from dinfer_engine.parallel import vocab as split

# bytes of one tile's values over the vocabulary on a CPU: the tile and the two
# temporaries of its softmaxes and logsumexp stay within a core's L2 cache
TILE_BYTES = 512 << 10
MIN_TILE = 2  # positions: a reduction over one position splits the vocabulary


def tile_bounds(length: int, width: int, device: torch.device) -> list[tuple[int, int]]:
    """[start, end) tiles over a canvas of `length` positions of `width` fp32 values
    each: TILE_BYTES' worth of positions (MIN_TILE at least, the remainder spread over
    the tiles so that none is shorter) on a CPU, the whole canvas elsewhere (a GPU reads
    memory fast and pays per kernel launch)."""
    if device.type != "cpu":
        return [(0, length)]
    count = max(1, length // max(MIN_TILE, TILE_BYTES // (4 * width)))
    edges = [length * i // count for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def floor_subnormals(scaled: torch.Tensor, peak: torch.Tensor, vocab: int) -> None:
    """Raise, in place, every scaled logit lying more than log(1 / (tiny * vocab)) below
    its position's maximum (tiny: the smallest normal float) to that depth, so that no
    exponential, probability or entropy term the step computes is subnormal: a CPU
    computes with subnormals many times slower (figures in docs/engine.md). Only
    probabilities below ~1e-33 (1e-38 x vocab) move, and only to another such value:
    their shares of every sum the step and the next forward take (the softmax's
    denominator, the entropy, the self-conditioning product) lie far below those sums'
    rounding, and none can win a sample (p / draw < 1e-30; the best is > 1e-7), so the
    tokens are the reference's. `peak`: the maxima [N] (which the floor leaves as they
    were, as it leaves the argmax)."""
    depth = -math.log(torch.finfo(scaled.dtype).tiny * vocab) - 0.5  # margin: e^-0.5
    torch.maximum(scaled, (peak - depth)[..., None], out=scaled)


def argmax_only(logits: torch.Tensor, temperature: torch.Tensor,
                bounds: list[tuple[int, int]]) -> torch.Tensor:
    """A canvas at its last step: the argmax [L] of its logits [L, V] over its
    `temperature` (a 0-dim fp32 tensor), the logits scaled in place."""
    best = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    for start, end in bounds:
        best[start:end] = split.max_and_argmax(logits[start:end].div_(temperature))[1]
    return best


def decide(logits: torch.Tensor, temperature: torch.Tensor, vocab: int,
           bounds: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A canvas with a next step: from its logits [L, V] (overwritten with its
    probabilities) and `temperature` (a 0-dim fp32 tensor), its argmax [L] and
    entropies [L]. Term for term the reference's: softmax(logits / temperature), and
    Categorical(logits / temperature).entropy() (the scaled logits less their logsumexp,
    times their softmax, summed; the logsumexp from the argmax's maxima, torch's own
    steps)."""
    best = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    entropy = torch.empty(logits.shape[0], device=logits.device)
    for start, end in bounds:
        scaled = logits[start:end].div_(temperature)
        peak, best[start:end] = split.max_and_argmax(scaled)
        floor_subnormals(scaled, peak, vocab)
        probs = split.softmax(scaled)
        normalised = scaled.sub_(split.logsumexp(scaled, peak)[..., None])
        entropy[start:end] = -split.total(normalised.mul_(split.softmax(normalised)))
        scaled.copy_(probs)
    return best, entropy
