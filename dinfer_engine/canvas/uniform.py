"""The canvas as an object: what a row's answer region starts as, what one step may change
given the model's logits, and when it is done. The uniform-noise canvas is
DiffusionGemma's (docs/adr/027-diffusion-gemma.md): it starts as uniform random tokens;
each step samples every position at a linearly falling temperature, keeps the
lowest-entropy samples within an entropy bound and renoises the rest; it is done when
the argmax canvas is stable and confident, or after max_denoising_steps. Steps run for a
batch of rows at once, their vocabulary-wide work over slices of whole canvases within a
memory budget (docs/adr/042-bounded-step-memory.md), the per-position part over tiles of
positions that stay in cache (uniform_tiles, ADR 050); every random draw comes from the
row's own generator, in transformers' order (init; per step: multinomial, renoise).

Under tensor parallelism the logits and probabilities are a rank's vocabulary slice:
every reduction over the vocabulary goes through dinfer_engine/parallel/vocab.py, and each rank
draws the same full-vocabulary noise from the row's generator, so every rank takes the
same decisions, those of one rank."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

from dinfer_engine.canvas import exponential
from dinfer_engine.canvas import uniform_tiles as tiles
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.parallel import vocab as split

if TYPE_CHECKING:
    from dinfer_engine.batch import Request
    from dinfer_engine.models.diffusion_gemma import DiffusionGemmaLM
    from dinfer_engine.prefix_cache import PrefixCache

# bytes of [positions, vocabulary] fp32 values one step holds at once
# (docs/adr/042-bounded-step-memory.md)
STEP_BUDGET = 1 << 30
# such values per position a slice holds at its peak: its logits, which become its
# probabilities, and one temporary as large at most (the probabilities of the canvases
# with a next step when others have none, or a canvas's chosen probabilities and draws
# while it samples); the per-position work's tiles are small beside them
SLICE_WIDTHS = 2


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
    (dinfer_engine/generation_fields.py); `final`: the row's last canvas, whose generator
    nothing reads once it is done, so the step that ends it makes none of its draws."""

    def __init__(self, settings: ResolvedConfig, length: int, vocab: int,
                 generator: torch.Generator, device: torch.device, final: bool = False
                 ) -> None:
        self.settings, self.vocab, self.generator = settings, vocab, generator
        self.final = final
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


class UniformCanvas:
    """The run's canvas of uniform-noise block diffusion (DiffusionGemma), one object per
    run as MaskCanvas is (CANVASES["uniform"]): a row's answer is up to ceil(gen_length /
    canvas_length) canvases of canvas_length tokens (UniformNoiseCanvas, one at a time),
    each starting as uniform noise from the row's generator; a row takes canvas_length
    columns of a step. A done canvas's argmax is committed; the row ends after a canvas
    holding a stop token (pad after it, as transformers' generate returns it) or its last
    one, its answer cut to gen_length."""

    def __init__(self, config: ResolvedConfig, model: DiffusionGemmaLM,
                 prefix: PrefixCache | None = None) -> None:
        """prefix: unused here (the loop shares prompt prefixes through the encoder)."""
        cfg = model.config
        self.config, self.length, self.vocab = config, cfg.canvas_length, cfg.vocab_size
        self.pad_id = cfg.pad_token_id
        self.device = next(model.parameters()).device
        self.canvases = math.ceil(config.gen_length / self.length)  # a row's at most

    def row_length(self, request: Request) -> int:
        return self.length

    def next(self, generator: torch.Generator, answered: int) -> UniformNoiseCanvas:
        """A row's next canvas after `answered` committed answer tokens (final: its last,
        the row's end whatever it holds)."""
        return UniformNoiseCanvas(self.config, self.length, self.vocab, generator,
                                  self.device,
                                  answered + self.length >= self.canvases * self.length)

    def commit(self, answer: list[int], tokens: list[int], stop_ids: list[int]) -> bool:
        """Append a done canvas's `tokens` to the row's `answer`; True when the row ends
        (a stop token in them, padded after it, or its last canvas), its answer then cut
        to gen_length."""
        answer += tokens
        stop = next((i for i, t in enumerate(tokens) if t in stop_ids), None)
        if stop is None and len(answer) < self.canvases * self.length:
            return False
        if stop is not None:
            tail = len(tokens) - stop - 1
            answer[len(answer) - tail:] = [self.pad_id] * tail
        del answer[self.config.gen_length:]
        return True


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
    [B, L, H] (zeros for a canvas that this step ends, at its last step or stable and
    confident: none reads them, its row's next canvas starts without); None when this
    step ends every canvas.

    The head, the per-position work (uniform_tiles: temperature, argmax, softmax,
    entropy, over tiles of positions that stay in cache), the samples and the
    self-conditioning product run over slices of rows_per_slice(...) whole canvases, so
    the step never holds more than `budget` bytes (None: STEP_BUDGET) of vocabulary-wide
    values (or one canvas's), not [B, L, V]. A slice changes no bit: the head and the
    product run on the fixed grid (a row's bits independent of the rows beside it) and
    every reduction is over one position's whole vocabulary, as for the batch at once.
    The draws are made only where a sample is kept (none on a row's last canvas at the
    step that ends it), the softmax and entropy only for canvases with a next step, the
    product only for those this step does not end."""
    size = rows_per_slice(hidden.shape[1], own_width(canvases[0].vocab),
                          STEP_BUDGET if budget is None else budget)
    argmax = torch.empty(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    tokens = torch.empty_like(argmax)
    conditioning: torch.Tensor | None = None
    # a last step ends the canvas whatever it finds, another a stable and confident one
    ends = [canvas.steps_left == 1 for canvas in canvases]
    for first in range(0, len(canvases), size):
        part = canvases[first:first + size]
        probs, entropy = decide(part, head.logits(hidden[first:first + len(part)]),
                                argmax[first:first + len(part)])
        going = [b for b, canvas in enumerate(part) if canvas.steps_left > 1]
        accepted = torch.zeros((len(part), hidden.shape[1]), dtype=torch.bool,
                               device=hidden.device)
        if going:
            accepted[going] = accept(entropy[going], part[0].settings.entropy_bound)
            sure = (entropy[going].mean(-1) < part[0].settings.confidence_threshold).tolist()
            for i, b in enumerate(going):
                ends[first + b] = sure[i] and stable(part[b], argmax[first + b])
        onward = [b for b in going if not ends[first + b]]
        if onward:
            if conditioning is None:
                conditioning = hidden.new_zeros(hidden.shape)
            mass = probs if len(onward) == len(part) else probs[onward]
            conditioning[[first + b for b in onward]] = head.expected(mass).to(hidden.dtype)
            del mass
        tokens[first:first + len(part)] = renoise(
            part, [probs[b] if b in onward else None for b in range(len(part))], accepted,
            ends[first:first + len(part)])
        del probs
    for b, canvas in enumerate(canvases):
        canvas.tokens, canvas.argmax = tokens[b], argmax[b]
        if len(canvas.history):
            canvas.history = torch.cat([canvas.history[1:], argmax[b][None]])
        canvas.conditioning_row = b
        canvas.steps_left -= 1
        canvas.done = ends[b]
    return conditioning


def stable(canvas: UniformNoiseCanvas, argmax: torch.Tensor) -> bool:
    """Whether `argmax` [L] equals each of the canvas's last stability_threshold argmaxes
    (True when the threshold is 0)."""
    return bool((canvas.history == argmax).all())


def renoise(canvases: list[UniformNoiseCanvas], probs: list[torch.Tensor | None],
            accepted: torch.Tensor, ends: list[bool]) -> torch.Tensor:
    """The canvases' next tokens [b, L]: their samples (sample()) where `accepted`, fresh
    noise elsewhere, each canvas's draws in the reference's order (the multinomial's, then
    the noise's). Nothing reads the tokens of a canvas that this step ends (`ends`): it
    takes no sample (its generator passes the multinomial's draws at once, for its row's
    next canvas), and on its row's last canvas makes no draw at all (nothing reads its
    generator again either; its tokens are left as they were)."""
    idle = [end and canvas.final for canvas, end in zip(canvases, ends, strict=True)]
    if any(ends):
        accepted = accepted & ~torch.tensor(ends, device=accepted.device)[:, None]
    sampled = sample(canvases, probs, accepted, idle)
    length = accepted.shape[1]
    noise = torch.stack([canvas.tokens if quiet else canvas._noise(length, accepted.device)
                         for canvas, quiet in zip(canvases, idle, strict=True)])
    return torch.where(accepted, sampled, noise)


def decide(canvases: list[UniformNoiseCanvas], logits: torch.Tensor, argmax: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The canvases' argmax (written into `argmax` [b, L]) and entropies [b, L] (those of
    canvases at their last step unset) from their logits [b, L, V], which become, for the
    canvases with a next step, their probabilities (returned: the same tensor). Each
    canvas at its temperature, which falls linearly with the steps it has left."""
    settings = canvases[0].settings
    left = torch.tensor([c.steps_left for c in canvases], dtype=torch.int32,
                        device=logits.device)
    temperature = settings.t_min + (settings.t_max - settings.t_min) * (
        left / settings.max_denoising_steps)
    entropy = torch.empty(argmax.shape, device=logits.device)
    bounds = tiles.tile_bounds(logits.shape[1], logits.shape[2], logits.device)
    for b, canvas in enumerate(canvases):
        if canvas.steps_left > 1:
            argmax[b], entropy[b] = tiles.decide(logits[b], temperature[b], canvas.vocab,
                                                 bounds)
        else:
            argmax[b] = tiles.argmax_only(logits[b], temperature[b], bounds)
    return logits, entropy


def accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """The positions each canvas keeps [b, L], from its entropies [b, L]: the lowest
    entropies whose sum before them is within `bound`."""
    ordered, order = entropy.sort(dim=-1)
    chosen = ordered.cumsum(-1) - ordered <= bound
    kept = torch.zeros(chosen.shape, dtype=torch.bool, device=chosen.device)
    return kept.scatter(-1, order, chosen)


def sample(canvases: list[UniformNoiseCanvas], probs: list[torch.Tensor | None],
           wanted: torch.Tensor, idle: list[bool]) -> torch.Tensor:
    """The reference's multinomial samples [b, L] (argmax of probs / draw) where `wanted`,
    0 elsewhere (probs[i]: canvas i's [L, V], None where it wants none); every canvas's
    generator ends past the draws of all its positions, as after the reference's
    multinomial over them all, but an `idle` canvas's (which wants none), left as it is.
    One canvas at a time, so its temporaries are its chosen positions' probabilities and
    draws. A CPU generator's draws are made only at wanted positions
    (exponential.ExponentialStream: the same floats); another's (CUDA) all, by torch."""
    sampled = torch.zeros(wanted.shape, dtype=torch.long, device=wanted.device)
    wanted_at: list[list[int]] = [[] for _ in canvases]
    for b, position in wanted.nonzero().tolist():  # one read from the device
        wanted_at[b].append(position)
    for b, canvas in enumerate(canvases):
        if idle[b]:
            continue
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
