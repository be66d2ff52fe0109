"""Completion windows: a job not finished within its window becomes `expired`. Its
unfinished requests fail with `batch_expired`; finished ones stay in the output, as in
OpenAI's Batch API.

Reads never write (docs/adr/032): a job past its window that nothing has expired yet reads
as expired (`as_read`; its pending lines read `batch_expired`: formats/results/output.py). The
paths that may write expire it: the reaper's pass (once per fleet per interval, by the
holder of its lease: docs/adr/057-fleet-work-once.md), a worker's check before a chunk
and between engine batches (so it stops spending time on the job), and a change of the
job (cancel, retry, delete) before it acts. A worker's claim skips a job past its window
(`with_status`)."""

from __future__ import annotations

import re
import time

from sqlalchemy import ColumnElement, and_, inspect, not_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import NotFound, UserError
from dinfer_batch.formats.limits import shown
from dinfer_batch.formats.results.output import EXPIRED_ERROR
from dinfer_batch.jobs.transitions import move
from dinfer_batch.statuses import EXPIRABLE, ChunkStatus, ItemStatus, JobStatus
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import Chunk, Item, Job

WINDOW = re.compile(r"([1-9][0-9]{0,6})([smhd])")  # whole string: fullmatch, no "24h\n"
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# the longest window: a queued job holds its owner's quota until it ends or expires, so a
# window of a year would hold it for a year (OpenAI offers only 24h)
MAX_WINDOW_SECONDS = 7 * 86400


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
    """Past its window and not yet expired (nor otherwise ended)."""
    return (job.expires_at is not None and job.status in EXPIRABLE
            and (now or time.time()) >= job.expires_at)


def _past_window(now: float) -> ColumnElement[bool]:
    return and_(Job.status.in_(EXPIRABLE), Job.expires_at.is_not(None),
                Job.expires_at <= now)


def as_read(job: Job, now: float | None = None) -> Job:
    """The job as a read shows it: the job itself, or for one past its window that nothing
    has expired yet, a copy no session holds showing what `expire` will write (status
    `expired`, `expired_at` its window's end, its unfinished requests failed). Neither the
    database nor the job read is changed."""
    if not overdue(job, now):
        return job
    shown = {attr.key: getattr(job, attr.key) for attr in inspect(Job).column_attrs}
    return Job(**shown | {"status": JobStatus.EXPIRED.value, "expired_at": job.expires_at,
                          "failed_count": job.total_count - job.completed_count})


def with_status(status: str, now: float | None = None) -> ColumnElement[bool]:
    """Jobs a read shows with `status` (as_read): those past their window as expired."""
    past = _past_window(now or time.time())
    if status == JobStatus.EXPIRED:
        return or_(Job.status == status, past)
    return and_(Job.status == status, not_(past)) if status in EXPIRABLE \
        else Job.status == status


def expire(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Expire the job if it is past its window and still running; True when it did. Its
    `expired_at` is its window's end, as reads showed it before."""
    with sessions.begin() as session:
        if not move(session, job_id, JobStatus.EXPIRED, _past_window(time.time()),
                    expired_at=Job.expires_at):
            return False
        now = time.time()
        move_rows(session, ChunkStatus.CANCELLED, Chunk.job_id == job_id,
                  Chunk.status == ChunkStatus.QUEUED)
        unfinished = move_rows(session, ItemStatus.FAILED, Item.job_id == job_id,
                               error_code=EXPIRED_ERROR[0], error_message=EXPIRED_ERROR[1],
                               finished_at=now)
        session.execute(update(Job).where(Job.id == job_id)
                        .values(failed_count=Job.failed_count + unfinished))
    return True


def expire_overdue(sessions: sessionmaker[Session], owner: str | None = None) -> int:
    """Expire every running job past its window (of one owner, or all); how many it
    expired."""
    with sessions() as session:
        job_ids = overdue_ids(session, owner)
    return sum(expire(sessions, job_id) for job_id in job_ids)


def overdue_ids(session: Session, owner: str | None = None) -> list[str]:
    """In the caller's session: the ids of the running jobs past their window (of one
    owner, or all)."""
    query = select(Job.id).where(_past_window(time.time()))
    if owner is not None:
        query = query.where(Job.owner == owner)
    return list(session.scalars(query))


def get_job(sessions: sessionmaker[Session], job_id: str, owner: str | None = None) -> Job:
    """The job as a read shows it, without writing: one past its completion window reads
    as expired (expiry.as_read) until a worker, `beat` or a change expires it; NotFound
    otherwise."""
    return as_read(_stored(sessions, job_id, owner))


def get_job_to_change(sessions: sessionmaker[Session], job_id: str,
                      owner: str | None = None) -> Job:
    """The job for a change or a worker about to act on it: expired first (written) if it
    is past its completion window, so that it acts on the job reads show; NotFound
    otherwise."""
    job = _stored(sessions, job_id, owner)
    if not overdue(job):
        return job
    expire(sessions, job_id)
    return _stored(sessions, job_id, owner)


def _stored(sessions: sessionmaker[Session], job_id: str, owner: str | None) -> Job:
    with sessions() as session:
        job = session.get(Job, job_id)
    if job is None or (owner is not None and job.owner != owner):
        raise NotFound(f"no job with id {job_id!r} (see `dinfer-batch list`)")
    return job
