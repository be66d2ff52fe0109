"""The canvas as an object: what a row's answer region starts as, what one step may change
given the model's logits, and when it is done. The uniform-noise canvas is
DiffusionGemma's (docs/adr/027-diffusion-gemma.md): it starts as uniform random tokens;
each step samples every position at a linearly falling temperature, keeps the
lowest-entropy samples within an entropy bound and renoises the rest; it is done when
the argmax canvas is stable and confident, or after max_denoising_steps. Steps run for a
batch of rows at once, their vocabulary-wide work over slices of whole canvases within a
memory budget (docs/adr/042-bounded-step-memory.md); every random draw comes from the
row's own generator, in transformers' order (init; per step: multinomial, renoise).

Under tensor parallelism the logits and probabilities are a rank's vocabulary slice:
every reduction over the vocabulary goes through dinfer_engine/parallel/vocab.py, and each rank
draws the same full-vocabulary noise from the row's generator, so every rank takes the
same decisions, those of one rank."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from dinfer_engine.canvas import exponential
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.parallel import vocab as split

# bytes of [positions, vocabulary] fp32 values one step holds at once
# (docs/adr/042-bounded-step-memory.md)
STEP_BUDGET = 1 << 30
# such values per position a slice holds at its peak: the scaled logits, the probabilities
# and one temporary (the logsumexp's exponentials, the entropy's softmax, or a canvas's
# chosen probabilities and draws while it samples)
SLICE_WIDTHS = 3


class Head(NamedTuple):
    """The model's two products with its vocabulary: `logits` turns the decoder's last
    hidden states [b, L, H] into fp32 logits [b, L, V] (a rank's vocabulary slice under
    tensor parallelism); `expected` turns probabilities [b, L, V] into the expected
    embedding rows [b, L, H], the next step's self-conditioning. Both on the fixed grid."""

    logits: Callable[[torch.Tensor], torch.Tensor]
    expected: Callable[[torch.Tensor], torch.Tensor]


class UniformNoiseCanvas:
    """One row's canvas of `length` tokens over a vocabulary of `vocab`; `settings`: the
    run's config, of which it reads the uniform canvas's own fields
    (dinfer_engine/generation_fields.py)."""

    def __init__(self, settings: ResolvedConfig, length: int, vocab: int,
                 generator: torch.Generator, device: torch.device) -> None:
        self.settings, self.vocab, self.generator = settings, vocab, generator
        self.tokens = self._noise(length, device)  # what the next forward reads
        self.argmax = self.tokens  # what the canvas commits when done
        # the canvas's row in the probabilities its last step returned (the next step's
        # self-conditioning); None before its first step
        self.conditioning_row: int | None = None
        self.steps_left = settings.max_denoising_steps
        self.history = torch.full((settings.stability_threshold, length), -1, device=device)
        self.done = False

    def _noise(self, length: int, device: torch.device) -> torch.Tensor:
        return torch.randint(0, self.vocab, (1, length), generator=self.generator,
                             device=device)[0]


def floor_subnormals(scaled: torch.Tensor, peak: torch.Tensor, vocab: int) -> None:
    """Raise, in place, every scaled logit lying more than log(1 / (tiny * vocab)) below
    its position's maximum (tiny: the smallest normal float) to that depth, so that no
    exponential, probability or entropy term the step computes is subnormal: a CPU
    computes with subnormals many times slower (figures in docs/engine.md). Only
    probabilities below ~1e-33 (1e-38 x vocab) move, and only to another such value:
    their shares of every sum the step and the next forward take (the softmax's
    denominator, the entropy, the self-conditioning product) lie far below those sums'
    rounding, and none can win a sample (p / draw < 1e-30; the best is > 1e-7), so the
    tokens are the reference's. `peak`: the maxima [B, L] (which the floor leaves as
    they were, as it leaves the argmax)."""
    depth = -math.log(torch.finfo(scaled.dtype).tiny * vocab) - 0.5  # margin: e^-0.5
    torch.maximum(scaled, (peak - depth)[..., None], out=scaled)


def rows_per_slice(length: int, vocab: int, budget: int) -> int:
    """How many canvases of `length` positions one slice of a step takes so that its
    SLICE_WIDTHS fp32 values per position and vocabulary entry (`vocab`: this rank's
    slice) stay within `budget` bytes; one at least, whatever the budget."""
    return max(1, budget // (SLICE_WIDTHS * length * vocab * 4))


def own_width(vocab: int) -> int:
    """This rank's share of a `vocab`-wide vocabulary (all of it on one rank)."""
    local = split.current()
    return vocab if local is None else local.count


def step(canvases: list[UniformNoiseCanvas], hidden: torch.Tensor, head: Head,
         budget: int | None = None) -> torch.Tensor | None:
    """One denoising step for every canvas, from the decoder's last hidden states
    [B, L, H], canvas b's at row b. Returns the next step's self-conditioning: each
    canvas's probabilities softmax(logits / temperature) times the embedding table
    [B, L, H] (zeros for a canvas at its last step: none reads them); None when every
    canvas took its last step.

    The head, softmax, entropy, samples and self-conditioning product run over slices of
    rows_per_slice(...) whole canvases, so the step never holds more than `budget` bytes
    (None: STEP_BUDGET) of vocabulary-wide values (or one canvas's), not [B, L, V]. A
    slice changes no bit: the head and the product run on the fixed grid (a row's bits
    independent of the rows beside it) and every reduction is over one position's whole
    vocabulary, as for the batch at once.

    The maths is the reference's term for term (Categorical(logits).entropy(): the
    logits less their logsumexp, times their softmax, summed; multinomial: argmax of the
    probabilities over one exponential draw per position and vocabulary entry), in place
    but for each row's draws from its own generator; the draws are made only where a
    sample is kept, the softmax, entropy and product only for canvases with a next step."""
    size = rows_per_slice(hidden.shape[1], own_width(canvases[0].vocab),
                          STEP_BUDGET if budget is None else budget)
    argmax = torch.empty(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    tokens = torch.empty_like(argmax)
    conditioning: torch.Tensor | None = None
    confident = [True] * len(canvases)  # a last step ends the canvas whatever it finds
    for first in range(0, len(canvases), size):
        part = canvases[first:first + size]
        scaled, peak, best = scale(part, head.logits(hidden[first:first + len(part)]))
        argmax[first:first + len(part)] = best
        going = [b for b, canvas in enumerate(part) if canvas.steps_left > 1]
        accepted = torch.zeros((len(part), hidden.shape[1]), dtype=torch.bool,
                               device=hidden.device)
        probs: list[torch.Tensor | None] = [None] * len(part)
        if going:
            if len(going) < len(part):
                index = torch.tensor(going, device=scaled.device)
                scaled, peak = scaled[index], peak[index]
            kept, entropy, mass = accept(scaled, peak, part[0].settings.entropy_bound)
            del scaled  # the entropy's terms now: freed before the samples' temporaries
            accepted[going] = kept
            sure = (entropy.mean(-1) < part[0].settings.confidence_threshold).tolist()
            for i, b in enumerate(going):
                confident[first + b], probs[b] = sure[i], mass[i]
            if conditioning is None:
                conditioning = hidden.new_zeros(hidden.shape)
            conditioning[[first + b for b in going]] = head.expected(mass).to(hidden.dtype)
        sampled = sample(part, probs, accepted)
        del probs
        noise = torch.stack([c._noise(hidden.shape[1], hidden.device) for c in part])
        tokens[first:first + len(part)] = torch.where(accepted, sampled, noise)
    for b, canvas in enumerate(canvases):
        canvas.tokens, canvas.argmax = tokens[b], argmax[b]
        stable = bool((canvas.history == argmax[b]).all())  # True when the threshold is 0
        if len(canvas.history):
            canvas.history = torch.cat([canvas.history[1:], argmax[b][None]])
        canvas.conditioning_row = b
        canvas.steps_left -= 1
        canvas.done = canvas.steps_left == 0 or (stable and confident[b])
    return conditioning


def scale(canvases: list[UniformNoiseCanvas], logits: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The canvases' logits [b, L, V] over each one's temperature (it falls linearly with
    the steps left), in place, floored (floor_subnormals); their maxima and argmax
    [b, L], from one pass."""
    settings = canvases[0].settings
    left = torch.tensor([c.steps_left for c in canvases], dtype=torch.int32,
                        device=logits.device)
    temperature = settings.t_min + (settings.t_max - settings.t_min) * (
        left / settings.max_denoising_steps)
    scaled = logits.div_(temperature[:, None, None])
    peak, best = split.max_and_argmax(scaled)
    floor_subnormals(scaled, peak, canvases[0].vocab)
    return scaled, peak, best


def accept(scaled: torch.Tensor, peak: torch.Tensor, bound: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From scaled logits [b, L, V] (overwritten with the entropy's terms) and their
    maxima: the positions each canvas keeps (the lowest entropies whose sum before them is
    within `bound`) [b, L], the entropies [b, L] and the probabilities [b, L, V]."""
    probs = split.softmax(scaled)
    normalised = scaled.sub_(split.logsumexp(scaled, peak)[..., None])
    entropy = -split.total(normalised.mul_(split.softmax(normalised)))
    ordered, order = entropy.sort(dim=-1)
    chosen = ordered.cumsum(-1) - ordered <= bound
    kept = torch.zeros(chosen.shape, dtype=torch.bool, device=chosen.device)
    return kept.scatter(-1, order, chosen), entropy, probs


def sample(canvases: list[UniformNoiseCanvas], probs: list[torch.Tensor | None],
           wanted: torch.Tensor) -> torch.Tensor:
    """The reference's multinomial samples [b, L] (argmax of probs / draw) where `wanted`,
    0 elsewhere (probs[i]: canvas i's [L, V], None where it wants none); every canvas's
    generator ends past the draws of all its positions, as after the reference's
    multinomial over them all. One canvas at a time, so its temporaries are its chosen
    positions' probabilities and draws. A CPU generator's draws are made only at wanted
    positions (exponential.ExponentialStream: the same floats); another's (CUDA) all, by
    torch."""
    sampled = torch.zeros(wanted.shape, dtype=torch.long, device=wanted.device)
    wanted_at: list[list[int]] = [[] for _ in canvases]
    for b, position in wanted.nonzero().tolist():  # one read from the device
        wanted_at[b].append(position)
    for b, canvas in enumerate(canvases):
        draws = exponential_draws(canvas, wanted_at[b], wanted.shape[1], wanted.device)
        mass = probs[b]
        if wanted_at[b]:
            assert mass is not None
            chosen = mass[wanted_at[b]]
            sampled[b, wanted_at[b]] = split.argmax(chosen.div_(draws.to(chosen.device)))
    return sampled


def exponential_draws(canvas: UniformNoiseCanvas, positions: list[int], length: int,
                      device: torch.device) -> torch.Tensor:
    """The canvas generator's exponential draws at `positions` [len, this rank's
    vocabulary slice] of a [length, vocabulary] multinomial; the generator ends past all
    of them."""
    vocab = canvas.vocab
    stream = exponential.stream(canvas.generator)
    if stream is None:
        full = torch.empty((length, vocab), device=device)
        full.exponential_(generator=canvas.generator)
        return split.own_slice(full[positions])
    draws = torch.empty((len(positions), own_width(vocab)))
    at = 0
    for i, position in enumerate(positions):
        stream.skip((position - at) * vocab)
        draws[i] = split.own_slice(torch.from_numpy(stream.take(vocab)))
        at = position + 1
    stream.skip((length - at) * vocab)
    stream.close()
    return draws
