"""The transactions of one ingest. PostgreSQL: one transaction for the whole file (COPY
into it; readers and other writers go on beside it). SQLite has one writer at a time, so
one transaction for a big file locked every other owner's writes out for as long as it
ran: there each batch of lines is its own transaction, the job
stays `validating` (no worker claims it, no quota counts it) until the last one, and a
short pause after each commit lets a waiting writer (a heartbeat, another owner's
batch) in. A file refused on the way is deleted again, in slices too, so nothing is
left behind either way (docs/adr/017-tenants.md)."""

from __future__ import annotations

import time
from types import TracebackType

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.statuses import JobStatus
from dinfer_batch.storage.tables import Chunk, Item, Job

PAUSE_S = 0.02  # after each slice: SQLite's busy handler polls every 1-100 ms
DELETE_SLICE = 20_000  # item rows deleted per transaction when a refused file is undone


class Slices:
    """`with Slices(sessions) as slices:` gives `slices.session` in a transaction;
    `made(job_id)` after the job is added, `commit()` after each batch (both only commit on
    SQLite); leaving the block commits, or rolls back and deletes what was committed."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.sliced = sessions.kw["bind"].dialect.name == "sqlite"
        self.session = sessions()
        self.job_id: str | None = None

    def __enter__(self) -> Slices:
        self.session.begin()
        return self

    def made(self, job_id: str) -> None:
        self.session.flush()
        self.job_id = job_id
        self.commit()

    def commit(self) -> None:
        if self.sliced:
            self.session.commit()
            time.sleep(PAUSE_S)
            self.session.begin()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if kind is None:
                self.session.commit()
                return
            self.session.rollback()
            if self.sliced and self.job_id is not None:
                undo(self.sessions, self.job_id)
        finally:
            self.session.close()


def undo(sessions: sessionmaker[Session], job_id: str) -> None:
    """Delete a job that never left `validating`, its items a slice at a time."""
    with sessions() as session:
        last = session.scalar(select(func.max(Item.line)).where(Item.job_id == job_id)) or 0
    for start in range(0, last + 1, DELETE_SLICE):
        with sessions.begin() as session:
            session.execute(delete(Item).where(Item.job_id == job_id, Item.line >= start,
                                               Item.line < start + DELETE_SLICE))
        time.sleep(PAUSE_S)
    with sessions.begin() as session:
        session.execute(delete(Chunk).where(Chunk.job_id == job_id))
        session.execute(delete(Job).where(Job.id == job_id, Job.status == JobStatus.VALIDATING))
