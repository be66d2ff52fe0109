"""Requests that were in hand when workers died (a crash, an OOM kill, a hang the watchdog
ends). A claim counts an attempt on every pending item of its chunk, so an item's
`attempts` less one is how many runs that held it died. Once a run died with them in hand
(SUSPECT_ATTEMPTS, counted at the next claim), the chunk's pending items are suspects and
run one at a time: the claim's attempt is taken back from all of them and counted again
on each one only while it is the one in the engine, and each result is written before the
next one starts. The innocent ones finish; the culprit alone carries the second death,
and the claim after it finds it past MAX_ATTEMPTS and fails it alone (WORKER_LOST)
without running it again, while the rest of the job goes on (docs/adr/017-tenants.md,
docs/adr/044-one-transitions-table.md)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.running.chunk_state import MAX_ATTEMPTS
from dinfer_batch.statuses import ItemStatus
from dinfer_batch.storage.tables import Item

SUSPECT_ATTEMPTS = MAX_ATTEMPTS  # the claim after a run that died
WORKER_LOST = ("worker_lost", f"workers died {MAX_ATTEMPTS} times while running this "
               "request (killed, out of memory, or hung); it was not run again")


def suspects(attempts: list[int]) -> list[bool]:
    return [count >= SUSPECT_ATTEMPTS for count in attempts]


def count_attempts(sessions: sessionmaker[Session], job_id: str, lines: list[int],
                   change: int) -> None:
    """Move these pending items' attempts by `change` (-1: the claim's count taken back;
    +1: this one is in hand)."""
    with sessions.begin() as session:
        session.execute(update(Item).where(Item.job_id == job_id, Item.line.in_(lines),
                                           Item.status == ItemStatus.PENDING)
                        .values(attempts=Item.attempts + change))
