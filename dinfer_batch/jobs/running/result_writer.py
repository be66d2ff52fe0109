"""Where a chunk's results go: buffered, and written in small transactions (every
FLUSH_ITEMS items or FLUSH_SECONDS seconds) while the engine is still running, each item
only while it is still pending (jobs/running/chunk_state.py: `record`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.formats.output import Outcome
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.storage.retry import UNREACHABLE, patiently
from dinfer_batch.storage.tables import Item

FLUSH_ITEMS = 32
# a slow model finishes an item every second or so: a shorter interval would make one
# write (on the job's one counter row) per item (docs/adr/005-scale.md)
FLUSH_SECONDS = 5.0


@dataclass
class ResultWriter:
    """Buffers outcomes and writes them in small transactions (every FLUSH_ITEMS items or
    FLUSH_SECONDS seconds), so results land while the engine is still running."""

    sessions: sessionmaker[Session]
    job_id: str
    retry_seconds: float  # how long a flush waits out a database outage
    on_written: Callable[[int], None] | None
    buffer: list[Outcome] = field(default_factory=list)
    last_flush: float = field(default_factory=time.monotonic)
    quiet_until: float = 0.0  # after a failed write, when to try again

    def add(self, outcome: Outcome) -> None:
        """Called while the engine runs: a write that cannot reach the database keeps the
        outcomes buffered (and is tried again FLUSH_SECONDS later) instead of holding up
        the engine call."""
        self.buffer.append(outcome)
        now = time.monotonic()
        due = len(self.buffer) >= FLUSH_ITEMS or now - self.last_flush > FLUSH_SECONDS
        if due and now >= self.quiet_until:
            try:
                self._write(chunk_state.record)
            except UNREACHABLE:
                self.quiet_until = now + FLUSH_SECONDS

    def fail(self, items: list[Item], code: str, message: str) -> None:
        """Fail the items not already finished (the write skips finished ones)."""
        self.fail_each([(item, code, message) for item in items])

    def fail_each(self, failures: list[tuple[Item, str, str]]) -> None:
        """Fail each item with its own code and message (unless already finished)."""
        for item, code, message in failures:
            self.buffer.append(Outcome(line=item.line, error_code=code, error_message=message))
        self.flush()

    def flush(self) -> None:
        """Write what is buffered, waiting for the database if it is down."""
        self._write(lambda sessions, job_id, outcomes: patiently(
            self.retry_seconds, chunk_state.record, sessions, job_id, outcomes))

    def _write(self, record: Callable[[sessionmaker[Session], str, list[Outcome]], int]) -> None:
        if self.buffer:
            written = record(self.sessions, self.job_id, self.buffer)
            if self.on_written:
                self.on_written(written)
        self.buffer, self.last_flush = [], time.monotonic()
