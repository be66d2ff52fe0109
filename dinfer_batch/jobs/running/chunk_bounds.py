"""What bounds a chunk's engine work (docs/adr/024-bounded-constraint-work.md): its
deadline, and its constraints compiled ahead of each engine call, once per worker (within
the limits a worker's entry set: dinfer_batch/jobs/running/engine_options.py)."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_workers.engine_cache import WorkerEngine

DEADLINE_CODE = "deadline_exceeded"
# a constrained row that alone would pass the engine's constraint memory budget
TOO_LARGE_CODE = "constraint_too_large"


class PastDeadline(Exception):
    """The chunk's deadline passed: leave the engine call at the next finished request."""


@dataclass(frozen=True)
class Bounds:
    """When a chunk's engine calls stop: the worker is stopping (the chunk is released),
    or the chunk's deadline (time.monotonic()) has passed (its remaining requests fail)."""

    stopping: threading.Event
    deadline: float
    seconds: float | None  # the deadline's setting; None: no deadline

    @classmethod
    def starting(cls, stopping: threading.Event, seconds: float | None) -> Bounds:
        """The bounds of a chunk starting now."""
        return cls(stopping, time.monotonic() + (seconds or math.inf), seconds)

    def past_deadline(self) -> bool:
        return time.monotonic() > self.deadline

    def deadline_message(self) -> str:
        return (f"the chunk's engine work passed its deadline of {self.seconds:g} s "
                "(DINFER_BATCH_CHUNK_DEADLINE) before this request finished; retry the "
                "batch to run it again")


def constraint_errors(engine: WorkerEngine, specs: list[ConstraintSpec | None],
                      bounds: Bounds) -> dict[int, str] | None:
    """Index -> why its constraint cannot compile, each distinct constraint compiled (once
    per worker: the engine remembers grammars and failures); None once the deadline
    passes (checked before the batch and after each compile)."""
    if bounds.past_deadline():
        return None
    reasons: dict[str, str | None] = {}
    for spec in specs:
        if spec is not None and spec.digest not in reasons:
            reasons[spec.digest] = engine.constraint_error(spec)
            if bounds.past_deadline():
                return None
    return {index: reason for index, spec in enumerate(specs) if spec is not None
            and (reason := reasons[spec.digest]) is not None}
