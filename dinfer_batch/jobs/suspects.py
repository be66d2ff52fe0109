"""Requests that were in hand when workers died. A claim counts an attempt on every
pending item of its chunk, so a line that kills its worker (a crash, a hang the watchdog
ends) used to take the whole chunk down with it, again on each next worker, until every
item of the chunk failed `worker_lost`. Now, once a chunk's items have been in two runs
that died (SUSPECT_ATTEMPTS, counted at the third claim), they are suspects and run one at
a time: the claim's attempt is taken back from all of them and counted again on each one
only while it is the one in the engine, and each result is written before the next one
starts. The innocent ones finish; the culprit alone carries the next death, and the claim
after it finds it past MAX_ATTEMPTS and fails it alone without running it again
(docs/adr/017-tenants.md)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.chunk_state import MAX_ATTEMPTS
from dinfer_batch.storage.tables import Item

SUSPECT_ATTEMPTS = MAX_ATTEMPTS  # the claim after two runs that died


def suspects(attempts: list[int]) -> list[bool]:
    return [count >= SUSPECT_ATTEMPTS for count in attempts]


def count_attempts(sessions: sessionmaker[Session], job_id: str, lines: list[int],
                   change: int) -> None:
    """Move these pending items' attempts by `change` (-1: the claim's count taken back;
    +1: this one is in hand)."""
    with sessions.begin() as session:
        session.execute(update(Item).where(Item.job_id == job_id, Item.line.in_(lines),
                                           Item.status == "pending")
                        .values(attempts=Item.attempts + change))
