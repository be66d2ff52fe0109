"""Requests that were in hand when workers died (a crash, an OOM kill, a hang the watchdog
ends). An item's `attempts` counts the runs that held it and neither finished it nor gave
it back, each counted once: at the claim for an item no run died with (the run takes it in
its batches), and for a suspect only while it is the one in the engine. A claim finds the
suspects by their attempts (at least SUSPECT_ATTEMPTS: a run died with them in hand) and
runs them one at a time, each result written before the next one starts. The innocent
ones finish; the culprit alone carries the second death, and the claim after it finds it
at MAX_ATTEMPTS and fails it alone (WORKER_LOST) without running it again, while the rest
of the job goes on (docs/adr/017-tenants.md, docs/adr/044-one-transitions-table.md,
docs/adr/063-one-count-of-attempts.md)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.running.chunk_state import MAX_ATTEMPTS
from dinfer_batch.statuses import ItemStatus
from dinfer_batch.storage.tables import Item

SUSPECT_ATTEMPTS = 1  # a run died with it in hand
WORKER_LOST = ("worker_lost", f"workers died {MAX_ATTEMPTS} times while running this "
               "request (killed, out of memory, or hung); it was not run again")


def suspects(attempts: list[int]) -> list[bool]:
    """Of items as their claim found them: which are suspects."""
    return [count >= SUSPECT_ATTEMPTS for count in attempts]


def lost(attempts: int) -> bool:
    """Whether an item as its claim found it has been in hand at MAX_ATTEMPTS deaths."""
    return attempts >= MAX_ATTEMPTS


def count_attempt(sessions: sessionmaker[Session], job_id: str, line: int) -> None:
    """Count the attempt of a suspect now in the engine, alone (if it is still pending)."""
    with sessions.begin() as session:
        session.execute(update(Item).where(Item.job_id == job_id, Item.line == line,
                                           Item.status == ItemStatus.PENDING)
                        .values(attempts=Item.attempts + 1))
