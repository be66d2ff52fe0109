"""The generation loop contract (docs/adr/058-one-loop-requests-as-objects.md): every
family's loop is an object that admits waiting rows, steps the running ones and hands
back the rows a step finished; `run` drives whichever loop the family's registry entry
names (dinfer_engine/choices.py), on one rank or on each rank of a tensor-parallel
replica (dinfer_engine/ranks/commands.py).

Both loops hold the run's canvas, one object per run built from the family's canvas
entry (dinfer_engine/canvas/): what a row's region starts as, how many columns a row
takes when it is admitted, and what the family does that the loop does not know about
(masked diffusion's blocks and forwards, infill's given text, DiffusionGemma's canvases
of uniform noise). Rows wait longest first (stable: rows as wide wait in input order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import torch

from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.parallel import vocab
from dinfer_engine.prefix_cache import PrefixCache


class RunCanvas(Protocol):
    """What every loop asks of its run's canvas."""

    def row_length(self, request: Request) -> int:
        """Columns a request's row takes in a step (its admission width)."""
        ...


class Loop(Protocol):
    """A family's generation loop over one run's rows, built as
    `Loop(model, requests, config, stop_ids, prefix)` (the rows it will see, for what
    the run's canvas and strategies must be ready for)."""

    canvas: RunCanvas

    @property
    def running(self) -> int:
        """Rows in the run now."""
        ...

    def admit(self, waiting: deque[Request]) -> None:
        """Take the waiting rows that fit from the queue's front into the run (one row
        always runs: dinfer_engine/row_budget.py), each started (Request.start)."""
        ...

    def step(self) -> list[FinishedRow]:
        """One iteration over the running rows; the rows it finished, taken out."""
        ...


def run(model: DiffusionLM, requests: list[Request], config: ResolvedConfig,
        stop_ids: list[int], on_finish: Callable[[FinishedRow], None],
        prefix: PrefixCache | None = None) -> None:
    """Decode every request under the resolved `config` with the family's loop, calling
    on_finish as each row finishes. `prefix`: the engine's prompt prefix cache, which
    block-causal families share (a finished row's counters say how many prompt tokens it
    reused). Under the model's vocabulary split (one rank's slice of a tensor-parallel
    model)."""
    with vocab.split(model), torch.inference_mode():
        loop: Loop = model.family.load_loop()(model, requests, config, stop_ids, prefix)
        waiting = deque(sorted(requests, key=lambda r: -loop.canvas.row_length(r)))
        while waiting or loop.running:
            loop.admit(waiting)
            for row in loop.step():
                on_finish(row)

