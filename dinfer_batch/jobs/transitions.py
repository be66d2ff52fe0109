"""Every change of a job's or a chunk's status goes through here: one conditional UPDATE
from the statuses the table allows (jobs/status.py: JOB_SOURCES, CHUNK_SOURCES) to the one
entered, so no caller spells where a status may come from; a caller's extra conditions
(`where`) only narrow it. A job's move stamps the entered status's time (`<status>_at`)
and, when it ends the job (status.ENDED), records the end in the same transaction (its
webhook event: webhooks/events.py), so whoever ends a job the end is recorded once: of
two moves racing from the same status, one matches the row. What else a change does
(chunks closed, items failed) is the caller's, in the same transaction (docs/adr/032,
docs/adr/044)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement, update
from sqlalchemy.orm import Session

from dinfer_batch.jobs.status import CHUNK_SOURCES, ENDED, JOB_SOURCES, ChunkStatus, JobStatus
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.tables import Chunk, Job
from dinfer_batch.webhooks.events import record_end


def move(session: Session, job_id: str, to: JobStatus, *where: ColumnElement[bool],
         now: float | None = None, **values: Any) -> bool:
    """Move the job to `to` from a status it may be entered from (and only while `where`
    holds), set `<to>_at` (unless `values` sets it) and `values`; True when it moved. The
    session's copy of the job row, if it holds one, is read again."""
    stamp = {f"{to}_at": time.time() if now is None else now}
    moved = changed(session, update(Job)
                    .where(Job.id == job_id, Job.status.in_(_values(JOB_SOURCES[to])), *where)
                    .values(status=str(to), **(stamp | values)))
    if moved and to in ENDED:
        record_end(session, job_id, str(to))
    held = session.identity_map.get(session.identity_key(Job, job_id))
    if moved and held is not None:
        session.refresh(held)  # the UPDATE sets only the attributes it had loaded
    return bool(moved)


def move_chunks(session: Session, job_id: str, to: ChunkStatus, *where: ColumnElement[bool],
                **values: Any) -> int:
    """Move the job's chunks that `where` selects (all of them without it) to `to`, those
    in a status it may be entered from; how many moved."""
    return changed(session, update(Chunk)
                   .where(Chunk.job_id == job_id,
                          Chunk.status.in_(_values(CHUNK_SOURCES[to])), *where)
                   .values(status=str(to), **values))


def _values(statuses: tuple[JobStatus, ...] | tuple[ChunkStatus, ...]) -> list[str]:
    return [str(status) for status in statuses]
