"""What bounds a chunk's engine work (docs/adr/024-bounded-constraint-work.md): its
deadline, and its constraints compiled ahead of each engine call, once per worker, under
the limits of the service's settings."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from dinfer_batch.config import settings
from engine.constraints.limited import MB
from engine.constraints.spec import ConstraintSpec
from workers.engine_cache import CompileLimits, WorkerEngine, set_constraint_limits

DEADLINE_CODE = "deadline_exceeded"


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


def limit_constraints() -> None:
    """The engines this process loads compile within the service's settings."""
    config = settings()
    set_constraint_limits(CompileLimits(config.compile_seconds, config.compile_memory_mb * MB,
                                        config.constraint_cache_mb * MB))


def constraint_errors(engine: WorkerEngine, specs: list[ConstraintSpec | None],
                      bounds: Bounds) -> dict[int, str] | None:
    """Index -> why its constraint cannot compile, each distinct constraint compiled (once
    per worker: the engine remembers automata and failures); None once the deadline
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
