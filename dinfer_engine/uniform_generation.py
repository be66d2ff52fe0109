"""The generation loop of uniform-noise block diffusion (DiffusionGemma,
docs/adr/027-diffusion-gemma.md), with continuous batching: rows at different canvases
and steps share one decoder forward; a row whose canvas is done commits its argmax
canvas, encodes it into its own cache and starts the next one, or leaves (after a
canvas holding a stop token, or its last canvas) and a waiting row takes its place.
A constrained row commits its argmax's witness instead, valid under its grammar
(dinfer_engine/canvas/uniform_constraints.py, ADR 043).
Each row draws from its own generator, so its tokens never depend on its neighbours.
Every rank of a tensor-parallel engine runs this loop in step (dinfer_engine/ranks/commands.py)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.canvas import UniformNoiseCanvas, step
from dinfer_engine.canvas.uniform import Head
from dinfer_engine.canvas.uniform_constraints import CommittedCanvases
from dinfer_engine.encoder_prefix import encode_prompts
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.diffusion_gemma import DiffusionGemmaLM, Layers
from dinfer_engine.models.diffusion_gemma_config import DiffusionGemmaConfig
from dinfer_engine.models.fixed_grid import linear
from dinfer_engine.parallel import vocab
from dinfer_engine.prefix_cache import REUSED, PrefixCache
from dinfer_engine.row_budget import RowBudget, joiners


@dataclass
class Row:
    request: Request
    generator: torch.Generator
    canvas: UniformNoiseCanvas
    committed: int  # tokens the encoder has seen: the prompt and committed canvases
    cache: Layers = field(default_factory=list)
    answer: list[int] = field(default_factory=list)
    forwards: int = 0
    counters: dict[str, int] = field(default_factory=dict)


@torch.inference_mode()
def run(model: DiffusionGemmaLM, requests: list[Request], config: ResolvedConfig,
        stop_ids: list[int], on_finish: Callable[[FinishedRow], None],
        prefix: PrefixCache | None = None) -> None:
    """Decode every request under the resolved `config` (its gen_length, max_batch_size,
    max_batch_tokens and uniform-noise fields): ceil(gen_length / canvas_length) canvases
    at most, as many rows at once as the budgets admit (rows x canvas_length within
    max_batch_tokens: the decoder's activations and the self-conditioning grow with it,
    while a step's vocabulary-wide values stay within canvas.uniform.STEP_BUDGET; the
    constrained rows' documented bytes within constraint_memory_mb, row_budget.py); the
    answer holds whole canvases, pad after the first stop token (as transformers'
    generate returns them). FinishedRow.nfe counts the row's decoder forwards; with a
    prefix cache (dinfer_engine/encoder_prefix.py) its counters say how many prompt tokens'
    keys/values it reused."""
    with vocab.split(model):
        _run(model, requests, config, stop_ids, on_finish, prefix)


def _run(model: DiffusionGemmaLM, requests: list[Request], config: ResolvedConfig,
         stop_ids: list[int], on_finish: Callable[[FinishedRow], None],
         prefix: PrefixCache | None) -> None:
    cfg = model.config
    device = next(model.parameters()).device
    canvases = math.ceil(config.gen_length / cfg.canvas_length)
    waiting = deque(requests)
    rows: list[Row] = []
    # the last step's probabilities times the embedding table: the next one's
    # self-conditioning
    expected: torch.Tensor | None = None
    constrained = CommittedCanvases(config.gen_length, cfg.vocab_size)
    budget = RowBudget.of(model, config)

    def new_canvas(generator: torch.Generator, answered: int) -> UniformNoiseCanvas:
        """A row's next canvas after `answered` committed answer tokens (final: its
        last, the row's end whatever it holds)."""
        return UniformNoiseCanvas(config, cfg.canvas_length, cfg.vocab_size, generator,
                                  device, answered + cfg.canvas_length
                                  >= canvases * cfg.canvas_length)

    while waiting or rows:
        joining = joiners(waiting, [r.request for r in rows], cfg.canvas_length,
                          lambda _request: cfg.canvas_length, config, budget)
        for request in joining:
            request.start(device, sampled=True)
        encoded = encode_prompts(model, [r.prompt for r in joining], prefix, device,
                                 [r.scope for r in joining])
        for request, (cache, reused) in zip(joining, encoded, strict=True):
            generator = request.generator
            assert generator is not None
            rows.append(Row(request, generator, new_canvas(generator, 0), len(request.prompt),
                            cache, counters={REUSED: reused} if prefix is not None else {}))
        positions = torch.stack([torch.arange(r.committed, r.committed + cfg.canvas_length,
                                              device=device) for r in rows])
        hidden = model.denoise(torch.stack([r.canvas.tokens for r in rows]),
                               [r.cache for r in rows], positions,
                               *conditioning(rows, expected, device))
        expected = step([r.canvas for r in rows], hidden,
                        observed_head(model, constrained, [r.request for r in rows]))
        still: list[Row] = []
        for row in rows:
            row.forwards += 1
            if row.canvas.done:  # a constrained row commits its argmax's witness
                row.canvas.argmax = constrained.commit(row.request, row.canvas.argmax,
                                                       len(row.answer))
            if row.canvas.done and finished(row, canvases, stop_ids, on_finish, cfg):
                continue
            still.append(row)
        go_on = [row for row in still if row.canvas.done]
        if go_on:  # their committed canvases, in one encoder forward
            model.encode_rows([r.cache for r in go_on], [r.canvas.argmax for r in go_on],
                              [r.committed for r in go_on])
        for row in go_on:
            row.committed += cfg.canvas_length
            row.canvas = new_canvas(row.generator, len(row.answer))
        rows = still


def finished(row: Row, canvases: int, stop_ids: list[int],
             on_finish: Callable[[FinishedRow], None], cfg: DiffusionGemmaConfig) -> bool:
    """Commit a done canvas's argmax to the row's answer; True (and on_finish called)
    when the row ends: a stop token in it, or its last canvas (pad after the stop)."""
    tokens = row.canvas.argmax.tolist()
    row.answer += tokens
    stop = next((i for i, t in enumerate(tokens) if t in stop_ids), None)
    if stop is None and len(row.answer) < canvases * cfg.canvas_length:
        return False
    if stop is not None:
        tail = len(tokens) - stop - 1
        row.answer[len(row.answer) - tail:] = [cfg.pad_token_id] * tail
    on_finish(FinishedRow(row.request, row.answer, row.forwards,
                          time.perf_counter() - row.request.started, counters=row.counters))
    return True


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
