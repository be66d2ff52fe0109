"""Retention: what is deleted, and when. A job's requests and results (its items) go when
`dinfer-batch delete` or a DELETE of its result file asks, when its results expire
(`output_expires_after`, counted from the job's end), or when it ended more than
DINFER_BATCH_RETENTION_DAYS ago. The job row stays, with its counts and `purged_at`.
An upload goes, bytes and row, when its `expires_after` has passed; finished webhook
deliveries (and their attempts and events) go after the retention period too.

What has expired is gone for readers at once (result_gone, file_gone: a 404), and is
deleted by `beat` (retention_pass), a bounded amount at a time: PURGE_ROWS items per
transaction, a few jobs and files per pass, never a job that has not ended. A purge first
marks the job (conditionally on it having ended), so that `retry` cannot reopen a job
whose items are going; a purge cut short is finished by the next pass."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from sqlalchemy import ColumnElement, delete, exists, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import WrongState
from dinfer_batch.jobs.expiry import get_job_to_change
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.tables import File, Item, Job
from dinfer_batch.webhooks.endpoints import prune_history

log = logging.getLogger("dinfer_batch.retention")

PURGE_ROWS = 5000  # items deleted per transaction
JOBS_PER_PASS = 10
FILES_PER_PASS = 100
RESUME_S = 86400  # purges cut short within this long are finished by later passes


def ended_at() -> ColumnElement[float]:
    return func.coalesce(Job.completed_at, Job.failed_at, Job.cancelled_at, Job.expired_at)


def result_gone(job: Job, now: float | None = None) -> bool:
    """The job's results are deleted, or past their `output_expires_after`."""
    if job.purged_at is not None:
        return True
    end = job.completed_at or job.failed_at or job.cancelled_at or job.expired_at
    return (job.output_expires_after is not None and end is not None and job.status in ENDED
            and (now or time.time()) >= end + job.output_expires_after)


def file_gone(row: File, now: float | None = None) -> bool:
    return row.expires_at is not None and (now or time.time()) >= row.expires_at


def delete_job(sessions: sessionmaker[Session], job_id: str, owner: str | None = None) -> int:
    """`dinfer-batch delete JOB`: delete its requests and results now; refused (WrongState)
    while it runs. Returns the items deleted (0 for a job already purged)."""
    job = get_job_to_change(sessions, job_id, owner)
    if job.status not in ENDED:
        raise WrongState(f"job {job_id} is still {job.status}; cancel it first "
                         f"(`dinfer-batch cancel {job_id}`), then delete it once it has ended")
    deleted = purge(sessions, job_id)
    if deleted is None:  # it was retried meanwhile
        raise WrongState(f"job {job_id} is running again; delete it once it has ended")
    return deleted


def purge(sessions: sessionmaker[Session], job_id: str, now: float | None = None) -> int | None:
    """Mark the ended job purged and delete its items, PURGE_ROWS lines per transaction.
    None (nothing deleted) when the job is not ended; a job already marked has what is
    left of its items deleted."""
    with sessions.begin() as session:
        marked = changed(session,
            update(Job).where(Job.id == job_id, Job.status.in_(ENDED))
            .values(purged_at=func.coalesce(Job.purged_at, now or time.time())))
    if not marked:
        return None
    deleted = 0
    while True:
        with sessions.begin() as session:
            first = session.scalar(select(func.min(Item.line)).where(Item.job_id == job_id))
            if first is None:
                return deleted
            deleted += changed(session, delete(Item).where(
                Item.job_id == job_id, Item.line >= first,
                Item.line < first + PURGE_ROWS))


def set_output_expiry(sessions: sessionmaker[Session], job_id: str, seconds: int) -> None:
    """A batch's `output_expires_after` (counted from its end)."""
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id)
                        .values(output_expires_after=seconds))


def delete_file(sessions: sessionmaker[Session], file_id: str) -> bool:
    """Delete an upload's row, then its bytes; False if it was gone already."""
    with sessions.begin() as session:
        row = session.get(File, file_id)
        if row is None:
            return False
        session.delete(row)
    Path(row.path).unlink(missing_ok=True)
    return True


def due_jobs(sessions: sessionmaker[Session], now: float, limit: int,
             days: float | None) -> list[tuple[str, str]]:
    """(job id, why) of up to `limit` ended jobs to purge: results expired, older than
    the retention of `days` (DINFER_BATCH_RETENTION_DAYS; None: none), or a purge cut
    short."""
    reasons: list[tuple[str, ColumnElement[bool]]] = [(
                "its results expired (output_expires_after)",
                Job.output_expires_after.is_not(None)
                & (ended_at() + Job.output_expires_after <= now))]
    if days:
        reasons.append((f"it ended more than {days:g} day(s) ago "
                        "(DINFER_BATCH_RETENTION_DAYS)", ended_at() < now - days * 86400))
    due: list[tuple[str, str]] = []
    with sessions() as session:
        for why, condition in reasons:
            due += [(job_id, why) for job_id in session.scalars(
                select(Job.id).where(Job.status.in_(ENDED), Job.purged_at.is_(None), condition)
                .limit(limit - len(due)))]
            if len(due) >= limit:
                return due
        due += [(job_id, "finishing a purge cut short") for job_id in session.scalars(
            select(Job.id).where(Job.purged_at > now - RESUME_S,
                                 exists().where(Item.job_id == Job.id))
            .limit(limit - len(due)))]
    return due


def retention_pass(sessions: sessionmaker[Session], days: float | None,
                   now: float | None = None) -> int:
    """One bounded pass of `beat`: expired uploads, jobs due for a purge, and with a
    retention period of `days` the webhook deliveries older than it; a log line for each.
    Returns how many things were deleted (a batch of deliveries counts as one)."""
    now = now or time.time()
    with sessions() as session:
        files = session.execute(select(File.id, File.path).where(File.expires_at <= now)
                                .order_by(File.expires_at).limit(FILES_PER_PASS)).all()
    done = 0
    for file_id, path in files:
        if not Path(path).parent.is_dir():  # kept until a beat that sees the bytes runs
            log.warning("retention: file %s expired, but its directory %s is not on this "
                        "machine: run beat where the API's DINFER_BATCH_FILES_DIR is",
                        file_id, Path(path).parent)
            continue
        if delete_file(sessions, file_id):
            log.info("retention: file %s expired (expires_after); deleted", file_id)
            done += 1
    for job_id, why in due_jobs(sessions, now, JOBS_PER_PASS, days):
        deleted = purge(sessions, job_id, now)
        if deleted is not None:
            log.info("retention: job %s purged, %d request(s) and result(s) deleted: %s",
                     job_id, deleted, why)
            done += 1
    if days:
        pruned = prune_history(sessions, now - days * 86400, PURGE_ROWS)
        if pruned:
            log.info("retention: %d webhook deliveries older than %g day(s) deleted", pruned,
                     days)
            done += 1
    return done


def start(sessions: sessionmaker[Session], interval: float,
          stop: threading.Event, days: float | None) -> threading.Thread:
    """Run retention_pass (`days`: its retention period) every `interval` seconds (sooner
    while there is more to do) on a daemon thread until `stop` is set; a failed pass is
    logged and tried again."""

    def loop() -> None:
        while not stop.is_set():
            busy = False
            try:
                busy = retention_pass(sessions, days) > 0
            except Exception:
                log.exception("retention pass failed; trying again in %gs", interval)
            stop.wait(min(0.1, interval) if busy else interval)

    thread = threading.Thread(target=loop, name="dinfer-retention", daemon=True)
    thread.start()
    return thread
