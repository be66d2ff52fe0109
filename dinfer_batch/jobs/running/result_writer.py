"""Where a chunk's results go: buffered, and written in small transactions (every
FLUSH_ITEMS items or FLUSH_SECONDS seconds) while the engine is still running, each item
only while it is still pending (jobs/running/chunk_state.py: `record`).

The writes the engine's results call for run on the worker's writer thread (`writes`,
one per ChunkRunner, which also measures there a job its chunk ended), at most one at a
time, so the engine's thread spends neither the SQL's CPU nor its round trips on them;
it only hands a batch over and, at the next result, collects how it went. Where an
order matters it waits (`flush`): before a chunk closes, before a suspect's run is
followed by the next, when failures are written and when the worker stops. A write
keyed by `(job_id, line)` that only writes pending items is what keeps this exactly
once: two writes of one item, from this thread or another worker, never both land."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.formats.results.output import Outcome
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.storage.retry import patiently, unreachable
from dinfer_batch.storage.tables import Item

FLUSH_ITEMS = 32
# a slow model finishes an item every second or so: a shorter interval would make one
# write (on the job's one counter row) per item (docs/adr/005-scale.md)
FLUSH_SECONDS = 5.0


def writer_thread() -> ThreadPoolExecutor:
    """A worker's writer thread (one per ChunkRunner)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="dinfer-results")


@dataclass
class ResultWriter:
    """Buffers outcomes and writes them in small transactions (every FLUSH_ITEMS items or
    FLUSH_SECONDS seconds) on `writes`, so results land while the engine is still
    running."""

    sessions: sessionmaker[Session]
    job_id: str
    retry_seconds: float  # how long a flush waits out a database outage
    on_written: Callable[[int], None] | None
    writes: ThreadPoolExecutor
    duplicates: bool = True  # whether the job has duplicate lines (chunk_state.record)
    buffer: list[Outcome] = field(default_factory=list)
    last_flush: float = field(default_factory=time.monotonic)
    quiet_until: float = 0.0  # after a failed write, when to try again
    # the write on the writer thread, with the outcomes it holds
    in_flight: tuple[list[Outcome], Future[int]] | None = None

    def add(self, outcome: Outcome) -> None:
        """Called while the engine runs: hands the buffer to the writer thread when it is
        due and no write is in flight. A write that could not reach the database gives
        its outcomes back to the buffer (tried again FLUSH_SECONDS later) instead of
        holding up the engine call."""
        self.buffer.append(outcome)
        self._collect(wait=False)
        now = time.monotonic()
        if len(self.buffer) >= FLUSH_ITEMS or now - self.last_flush > FLUSH_SECONDS:
            self.send()

    def send(self) -> None:
        """Hand what is buffered to the writer thread, unless a write is in flight or the
        database was just found away."""
        self._collect(wait=False)
        if self.buffer and self.in_flight is None and time.monotonic() >= self.quiet_until:
            batch, self.buffer = self.buffer, []
            self.in_flight = batch, self.writes.submit(chunk_state.record, self.sessions,
                                                       self.job_id, batch, self.duplicates)
            self.last_flush = time.monotonic()

    def fail(self, items: list[Item], code: str, message: str) -> None:
        """Fail the items not already finished (the write skips finished ones)."""
        self.fail_each([(item, code, message) for item in items])

    def fail_each(self, failures: list[tuple[Item, str, str]]) -> None:
        """Fail each item with its own code and message (unless already finished)."""
        for item, code, message in failures:
            self.buffer.append(Outcome(line=item.line, error_code=code, error_message=message))
        self.flush()

    def flush(self) -> None:
        """Write everything: the write in flight first, then what is buffered, here,
        waiting for the database if it is down."""
        self._collect(wait=True)
        if self.buffer:
            batch, self.buffer = self.buffer, []
            self._written(patiently(self.retry_seconds, chunk_state.record, self.sessions,
                                    self.job_id, batch, self.duplicates))
        self.last_flush = time.monotonic()

    def _collect(self, wait: bool) -> None:
        """Take the result of the write in flight once it is done (`wait`: wait for it).
        A database away puts its outcomes back in front of the buffer; any other error is
        raised here, on the engine's thread, as a write made here would raise it."""
        if self.in_flight is None or not (wait or self.in_flight[1].done()):
            return
        batch, future = self.in_flight
        self.in_flight = None
        try:
            written = future.result()
        except DBAPIError as exc:
            if not unreachable(exc):
                raise
            self.buffer[:0] = batch
            self.quiet_until = time.monotonic() + FLUSH_SECONDS
            return
        self._written(written)

    def _written(self, count: int) -> None:
        if self.on_written:
            self.on_written(count)
