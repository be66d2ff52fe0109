"""Every change of a job's status goes through `move`: the one conditional UPDATE of
every status column (storage/moves.py, from statuses.JOB_SOURCES), which also stamps the
entered status's time (`<status>_at`) and, when it ends the job (statuses.ENDED), records
the end in the same transaction (its webhook event: webhooks/events.py), so whoever ends
a job the end is recorded once: of two moves racing from the same status, one matches the
row. What else a change does (chunks closed, items failed) is the caller's, in the same
transaction (docs/adr/032, docs/adr/044)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from dinfer_batch.statuses import ENDED, JobStatus
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import Job
from dinfer_batch.webhooks.events import record_end


def move(session: Session, job_id: str, to: JobStatus, *where: ColumnElement[bool],
         now: float | None = None, **values: Any) -> bool:
    """Move the job to `to` from a status it may be entered from (and only while `where`
    holds), set `<to>_at` (unless `values` sets it) and `values`; True when it moved. The
    session's copy of the job row, if it holds one, is read again."""
    stamp = {f"{to}_at": time.time() if now is None else now}
    moved = move_rows(session, to, Job.id == job_id, *where, **(stamp | values))
    if moved and to in ENDED:
        record_end(session, job_id, to)
    held = session.identity_map.get(session.identity_key(Job, job_id))
    if moved and held is not None:
        session.refresh(held)  # the UPDATE sets only the attributes it had loaded
    return bool(moved)
