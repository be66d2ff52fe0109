"""The generation loop of uniform-noise block diffusion (DiffusionGemma,
docs/adr/027-diffusion-gemma.md), one implementation of the loop contract
(dinfer_engine/loop.py), with continuous batching: rows at different canvases and steps
share one decoder forward; a row whose canvas is done commits its argmax canvas, encodes
it into its own cache and starts the next one, or leaves (after a canvas holding a stop
token, or its last canvas) and a waiting row takes its place. The run's canvas
(dinfer_engine.canvas.uniform.UniformCanvas) says what a row's canvases are and when it
ends. A constrained row commits its argmax's witness instead, valid under its grammar
(dinfer_engine/canvas/uniform_constraints.py, ADR 043).
Each row draws from its own generator, so its tokens never depend on its neighbours.

Budgets: as many rows at once as the budgets admit (rows x canvas_length within
max_batch_tokens: the decoder's activations and the self-conditioning grow with it,
while a step's vocabulary-wide values stay within canvas.uniform.STEP_BUDGET; the
constrained rows' documented bytes within constraint_memory_mb, row_budget.py).
FinishedRow.nfe counts the row's decoder forwards; with a prefix cache
(dinfer_engine/encoder_prefix.py) its counters say how many prompt tokens' keys/values it
reused."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.canvas import UniformNoiseCanvas, step
from dinfer_engine.canvas.run_canvas import canvas_for, sampled
from dinfer_engine.canvas.uniform import Head, UniformCanvas
from dinfer_engine.canvas.uniform_constraints import CommittedCanvases
from dinfer_engine.encoder_prefix import encode_prompts
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.diffusion_gemma import DiffusionGemmaLM, Layers
from dinfer_engine.models.fixed_grid import linear
from dinfer_engine.parallel import vocab
from dinfer_engine.prefix_cache import REUSED, PrefixCache
from dinfer_engine.row_budget import RowBudget, joiners


@dataclass
class Row:
    request: Request
    generator: torch.Generator
    canvas: UniformNoiseCanvas  # the one being denoised
    committed: int  # tokens the encoder has seen: the prompt and committed canvases
    cache: Layers = field(default_factory=list)
    answer: list[int] = field(default_factory=list)
    forwards: int = 0
    counters: dict[str, int] = field(default_factory=dict)


class UniformLoop:
    """One run of the uniform-noise loop: its canvas, rows and self-conditioning."""

    def __init__(self, model: DiffusionGemmaLM, requests: list[Request],
                 config: ResolvedConfig, stop_ids: list[int],
                 prefix: PrefixCache | None = None) -> None:
        self.model, self.config, self.stop_ids, self.prefix = model, config, stop_ids, prefix
        self.canvas: UniformCanvas = canvas_for(model, requests, config, prefix)
        self.rows: list[Row] = []
        # the last step's probabilities times the embedding table: the next one's
        # self-conditioning
        self.expected: torch.Tensor | None = None
        self.constrained = CommittedCanvases(config.gen_length, model.config.vocab_size)
        self.budget = RowBudget.of(model, config)
        self.sampled = sampled(model, config)  # always: the canvas samples

    @property
    def running(self) -> int:
        return len(self.rows)

    def admit(self, waiting: deque[Request]) -> None:
        """The joining rows' prompts are encoded together (their prefixes shared through
        the prefix cache); every row samples, whatever the temperature."""
        canvas = self.canvas
        joining = joiners(waiting, [r.request for r in self.rows], canvas.length,
                          canvas.row_length, self.config, self.budget)
        for request in joining:
            request.start(canvas.device, self.sampled)
        encoded = encode_prompts(self.model, [r.prompt for r in joining], self.prefix,
                                 canvas.device, [r.scope for r in joining])
        for request, (cache, reused) in zip(joining, encoded, strict=True):
            generator = request.generator
            assert generator is not None
            self.rows.append(Row(request, generator, canvas.next(generator, 0),
                                 len(request.prompt), cache,
                                 counters={REUSED: reused} if self.prefix is not None else {}))

    def step(self) -> list[FinishedRow]:
        """One decoder forward and denoising step for every row; a done canvas is
        committed, and its row ends or encodes it and starts its next canvas."""
        model, rows, length = self.model, self.rows, self.canvas.length
        positions = torch.stack([torch.arange(r.committed, r.committed + length,
                                              device=self.canvas.device) for r in rows])
        hidden = model.denoise(torch.stack([r.canvas.tokens for r in rows]),
                               [r.cache for r in rows], positions,
                               *conditioning(rows, self.expected, self.canvas.device))
        self.expected = step([r.canvas for r in rows], hidden,
                             observed_head(model, self.constrained, [r.request for r in rows]))
        ended: list[FinishedRow] = []
        for row in rows:
            row.forwards += 1
            if row.canvas.done:  # a constrained row commits its argmax's witness
                row.canvas.argmax = self.constrained.commit(row.request, row.canvas.argmax,
                                                            len(row.answer))
                if self.canvas.commit(row.answer, row.canvas.argmax.tolist(), self.stop_ids):
                    ended.append(FinishedRow(row.request, row.answer, row.forwards,
                                             time.perf_counter() - row.request.started,
                                             counters=row.counters))
        left = {id(f.request) for f in ended}
        self.rows = [row for row in rows if id(row.request) not in left]
        go_on = [row for row in self.rows if row.canvas.done]
        if go_on:  # their committed canvases, in one encoder forward
            model.encode_rows([r.cache for r in go_on], [r.canvas.argmax for r in go_on],
                              [r.committed for r in go_on])
        for row in go_on:
            row.committed += length
            row.canvas = self.canvas.next(row.generator, len(row.answer))
        return ended


def observed_head(model: DiffusionGemmaLM, constrained: CommittedCanvases,
                  requests: list[Request]) -> Head:
    """The model's head for one step, whose logits each slice of canvases shows the
    constrained rows' witness first (step() runs the head slice by slice, in row order,
    then overwrites the logits in place)."""
    seen = 0

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        nonlocal seen
        out = model.logits(hidden)
        constrained.observe(requests[seen:seen + len(out)], out)
        seen += len(out)
        return out

    return Head(logits, lambda probs: expected_embedding(model, probs))


def conditioning(rows: list[Row], expected: torch.Tensor | None, device: torch.device
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The self-conditioning arguments of model.denoise: the last step's probabilities
    times the embedding table (step()'s result), and each row's index in them (None when
    row b is their row b)."""
    index = [r.canvas.conditioning_row for r in rows]
    if expected is None or all(i is None for i in index):
        return None, None
    if index == list(range(len(expected))):
        return expected, None
    return expected, torch.tensor([-1 if i is None else i for i in index], device=device)


def expected_embedding(model: DiffusionGemmaLM, probs: torch.Tensor) -> torch.Tensor:
    """probs [B, L, V] times the tied embedding table: [B, L, H], on the fixed grid
    (a row's bits independent of B; under tensor parallelism the ranks' partial products
    over their vocabulary slices summed)."""
    return vocab.weighted_rows(probs, model.head_weight(), linear)
