"""Every change of a job's status goes through `move`: one conditional UPDATE of the job
row, from the statuses it may leave to the one it enters, stamping the entered status's
time (`<status>_at`). A move that ends the job (status.ENDED) records the end in the same
transaction (its webhook event: webhooks/events.py), so whoever ends a job (its ingest,
its last chunk, expiry, a crashed embedded run), the end is recorded once: of two moves
racing from the same status, one matches the row. What else a change does (chunks
closed, items failed) is the caller's, in the same transaction (docs/adr/032)."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from sqlalchemy import ColumnElement, update
from sqlalchemy.orm import Session

from dinfer_batch.jobs.status import ENDED, STATUSES
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.tables import Job
from dinfer_batch.webhooks.events import record_end

NOT_ENDED = tuple(status for status in STATUSES if status not in ENDED)


def move(session: Session, job_id: str, to: str, leaving: Collection[str],
         *where: ColumnElement[bool], now: float | None = None, **values: Any) -> bool:
    """Move the job from one of `leaving` to `to` (and only while `where` holds), set
    `<to>_at` (unless `values` sets it) and `values`; True when it moved. The session's
    copy of the job row, if it holds one, is read again."""
    stamp = {f"{to}_at": time.time() if now is None else now}
    moved = changed(session, update(Job)
                    .where(Job.id == job_id, Job.status.in_(leaving), *where)
                    .values(status=to, **(stamp | values)))
    if moved and to in ENDED:
        record_end(session, job_id, to)
    held = session.identity_map.get(session.identity_key(Job, job_id))
    if moved and held is not None:
        session.refresh(held)  # the UPDATE sets only the attributes it had loaded
    return bool(moved)
