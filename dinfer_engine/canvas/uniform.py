"""The canvas as an object: what a row's answer region starts as, what one step may change
given the model's logits, and when it is done. The uniform-noise canvas is
DiffusionGemma's (docs/adr/027-diffusion-gemma.md): it starts as uniform random tokens;
each step samples every position at a linearly falling temperature, keeps the
lowest-entropy samples within an entropy bound and renoises the rest; it is done when
the argmax canvas is stable and confident, or after max_denoising_steps. Steps run for a
batch of rows at once; every random draw comes from the row's own generator, in
transformers' order (init; per step: multinomial, renoise).

Under tensor parallelism the logits and probabilities are a rank's vocabulary slice:
every reduction over the vocabulary goes through dinfer_engine/parallel/vocab.py, and each rank
draws the same full-vocabulary noise from the row's generator, so every rank takes the
same decisions, those of one rank."""

from __future__ import annotations

import math

import torch

from dinfer_engine.canvas import exponential
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.parallel import vocab as split


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


def floor_subnormals(scaled: torch.Tensor, vocab: int) -> torch.Tensor:
    """Raise, in place, every scaled logit lying more than log(1 / (tiny * vocab)) below
    its position's maximum (tiny: the smallest normal float) to that depth, so that no
    exponential, probability or entropy term the step computes is subnormal: a CPU
    computes with subnormals tens of times slower (40x for the self-conditioning product
    on the benchmark's checkpoint). Only probabilities below ~1e-33 (1e-38 x vocab)
    move, and only to another such value: their shares of every sum the step and the
    next forward take (the softmax's denominator, the entropy, the self-conditioning
    product) lie far below those sums' rounding, and none can win a sample (p / draw
    < 1e-30; the best is > 1e-7), so the tokens are the reference's. Returns the
    maxima [B, L] (which the floor leaves as they were)."""
    depth = -math.log(torch.finfo(scaled.dtype).tiny * vocab) - 0.5  # margin: e^-0.5
    peak = split.amax(scaled)
    torch.maximum(scaled, (peak - depth)[..., None], out=scaled)
    return peak


def step(canvases: list[UniformNoiseCanvas], logits: torch.Tensor) -> torch.Tensor | None:
    """One denoising step for every canvas, from the decoder's fp32 logits [B, L, V], which
    it overwrites. Returns the step's probabilities softmax(logits / temperature)
    [B, L, V], canvas b's at row b, the self-conditioning of its next step; None when
    every canvas took its last step (no next step reads them, and the step needs only
    the argmax).

    The maths is the reference's term for term (Categorical(logits).entropy(): the
    logits less their logsumexp, times their softmax, summed; multinomial: argmax of the
    probabilities over one exponential draw per position and vocabulary entry), done in
    place over [B, L, V] and batched but for each row's draws from its own generator; the
    draws are made only where a sample is kept (sample())."""
    settings = canvases[0].settings
    left = torch.tensor([c.steps_left for c in canvases], dtype=torch.int32,
                        device=logits.device)
    temperature = settings.t_min + (settings.t_max - settings.t_min) * (
        left / settings.max_denoising_steps)
    scaled = logits.div_(temperature[:, None, None])
    peak = floor_subnormals(scaled, canvases[0].vocab)
    argmax = split.argmax(scaled)
    last = torch.tensor([c.steps_left == 1 for c in canvases], device=logits.device)
    probs = None
    accepted = torch.zeros(argmax.shape, dtype=torch.bool, device=argmax.device)
    confident = [True] * len(canvases)  # a last step ends the canvas whatever it finds
    if not bool(last.all()):
        probs = split.softmax(scaled)
        normalised = scaled.sub_(split.logsumexp(scaled, peak)[..., None])
        entropy = -split.total(normalised.mul_(split.softmax(normalised)))
        ordered, order = entropy.sort(dim=-1)
        chosen = ordered.cumsum(-1) - ordered <= settings.entropy_bound
        accepted = accepted.scatter(-1, order, chosen)
        confident = (entropy.mean(-1) < settings.confidence_threshold).tolist()
    # a canvas's tokens after its last step are never read: its samples are not made
    sampled = sample(canvases, probs, accepted & ~last[:, None])
    noise = torch.stack([c._noise(argmax.shape[1], argmax.device) for c in canvases])
    tokens = torch.where(accepted, sampled, noise)
    for b, canvas in enumerate(canvases):
        canvas.tokens, canvas.argmax = tokens[b], argmax[b]
        stable = bool((canvas.history == argmax[b]).all())  # True when the threshold is 0
        if len(canvas.history):
            canvas.history = torch.cat([canvas.history[1:], argmax[b][None]])
        canvas.conditioning_row = b
        canvas.steps_left -= 1
        canvas.done = canvas.steps_left == 0 or (stable and confident[b])
    return probs


def sample(canvases: list[UniformNoiseCanvas], probs: torch.Tensor | None,
           wanted: torch.Tensor) -> torch.Tensor:
    """The reference's multinomial samples [B, L] (argmax of probs / draw) where `wanted`,
    0 elsewhere; every canvas's generator ends past the draws of all its positions, as
    after the reference's multinomial over them all. A CPU generator's draws are made
    only at wanted positions (exponential.ExponentialStream: the same floats); another's
    (CUDA) all, by torch."""
    sampled = torch.zeros(wanted.shape, dtype=torch.long, device=wanted.device)
    length, vocab = wanted.shape[1], canvases[0].vocab
    rows, columns, draws = [], [], []
    wanted_at: list[list[int]] = [[] for _ in canvases]
    for b, position in wanted.nonzero().tolist():  # one read from the device
        wanted_at[b].append(position)
    for b, canvas in enumerate(canvases):
        positions = wanted_at[b]
        rows += [b] * len(positions)
        columns += positions
        stream, at = exponential.stream(canvas.generator), 0
        if stream is None:
            full = torch.empty((length, vocab), device=wanted.device)
            full.exponential_(generator=canvas.generator)
            draws.append(split.own_slice(full[positions]))
            continue
        for position in positions:
            stream.skip((position - at) * vocab)
            draws.append(split.own_slice(torch.from_numpy(stream.take(vocab))[None]))
            at = position + 1
        stream.skip((length - at) * vocab)
        stream.close()
    if rows:
        assert probs is not None
        chosen = probs[rows, columns]
        sampled[rows, columns] = split.argmax(chosen.div_(torch.cat(draws).to(chosen.device)))
    return sampled
