"""Completion windows: a job not finished within its window becomes `expired`. Its
unfinished requests fail with `batch_expired`; finished ones stay in the output, as in
OpenAI's Batch API. Expiry is applied when anyone looks at the job (a read, a list, a
worker between engine batches), so no extra process is needed and a worker stops
spending time on an expired job at its next engine batch."""

from __future__ import annotations

import re
import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import shown
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.tables import Chunk, Item, Job
from dinfer_batch.webhooks.events import record_end

WINDOW = re.compile(r"([1-9][0-9]{0,6})([smhd])")  # whole string: fullmatch, no "24h\n"
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# the longest window: a queued job holds its owner's quota until it ends or expires, so a
# window of a year would hold it for a year (OpenAI offers only 24h)
MAX_WINDOW_SECONDS = 7 * 86400
EXPIRABLE = ("validating", "in_progress", "finalizing")


def window_seconds(window: str) -> int:
    """`24h` -> 86400. OpenAI only offers "24h"; we take any `<N>s|m|h|d` up to
    MAX_WINDOW_SECONDS (7d)."""
    match = WINDOW.fullmatch(window) if isinstance(window, str) else None
    if match is None:
        raise UserError("completion_window must look like 24h, 90m or 3600s; got "
                        f"{shown(window)}")
    seconds = int(match[1]) * UNIT_SECONDS[match[2]]
    if seconds > MAX_WINDOW_SECONDS:
        raise UserError(f"completion_window must be at most {MAX_WINDOW_SECONDS // 86400}d "
                        f"({MAX_WINDOW_SECONDS // 3600}h, {MAX_WINDOW_SECONDS:,}s), got "
                        f"{window!r} ({seconds:,}s)")
    return seconds


def overdue(job: Job, now: float | None = None) -> bool:
    return (job.expires_at is not None and job.status in EXPIRABLE
            and (now or time.time()) >= job.expires_at)


def expire(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Expire the job if it is past its window and still running; True when it did."""
    now = time.time()
    with sessions.begin() as session:
        expired = changed(session,
            update(Job).where(Job.id == job_id, Job.status.in_(EXPIRABLE),
                              Job.expires_at.is_not(None), Job.expires_at <= now)
            .values(status="expired", expired_at=now)
        )
        if not expired:
            return False
        session.execute(update(Chunk).where(Chunk.job_id == job_id, Chunk.status == "queued")
                        .values(status="cancelled"))
        unfinished = changed(session,
            update(Item).where(Item.job_id == job_id, Item.status == "pending")
            .values(status="failed", error_code="batch_expired", finished_at=now,
                    error_message="the batch expired (completion_window) before this "
                                  "request ran")
        )
        session.execute(update(Job).where(Job.id == job_id)
                        .values(failed_count=Job.failed_count + unfinished))
        record_end(session, job_id, "expired")
    return True


def expire_overdue(sessions: sessionmaker[Session], owner: str | None = None) -> None:
    """Expire every running job past its window (of one owner, or all)."""
    query = select(Job.id).where(Job.status.in_(EXPIRABLE), Job.expires_at.is_not(None),
                                 Job.expires_at <= time.time())
    if owner is not None:
        query = query.where(Job.owner == owner)
    with sessions() as session:
        job_ids = list(session.scalars(query))
    for job_id in job_ids:
        expire(sessions, job_id)
