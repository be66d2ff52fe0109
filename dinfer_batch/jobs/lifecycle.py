"""Job operations after submission, for the CLI and the HTTP API alike: look up, list,
cancel, retry. `owner` None sees every job (the CLI is the operator's tool); the API
passes the caller's owner, and another owner's job is simply not found."""

from __future__ import annotations

import time

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError, WrongState
from dinfer_batch.jobs.expiry import (
    as_read,
    get_job,
    get_job_to_change,
    window_seconds,
    with_status,
)
from dinfer_batch.jobs.intake.quota import check_retry
from dinfer_batch.jobs.running.chunk_state import settle
from dinfer_batch.jobs.transitions import move
from dinfer_batch.statuses import ENDED, ChunkStatus, ItemStatus, JobStatus
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import Chunk, Item, Job

# the times of the statuses a job went through after in_progress: a retry clears them
CLEARED_BY_RETRY = ("finalizing_at", "completed_at", "failed_at", "cancelling_at",
                    "cancelled_at", "expired_at")


def list_jobs(sessions: sessionmaker[Session], status: str | None, limit: int,
              owner: str | None = None, after: str | None = None) -> list[Job]:
    """Newest first, as reads show them (get_job); `after` is the id of the last job of
    the previous page."""
    now = time.time()
    query: Select = select(Job).order_by(Job.created_at.desc(), Job.id.desc())
    if status:
        query = query.where(with_status(status, now))
    if owner is not None:
        query = query.where(Job.owner == owner)
    if after is not None:
        cursor = get_job(sessions, after, owner)
        query = query.where(or_(Job.created_at < cursor.created_at,
                                (Job.created_at == cursor.created_at) & (Job.id < cursor.id)))
    with sessions() as session:
        jobs = list(session.scalars(query.limit(limit)))
    return [as_read(job, now) for job in jobs]


def cancel_job(sessions: sessionmaker[Session], job_id: str, owner: str | None = None) -> None:
    """Move the job to cancelling and close its queued chunks; running chunks stop at their
    next engine batch, and the last one to stop marks the job cancelled. Permits in Redis
    name no chunk: nothing there to revoke."""
    get_job_to_change(sessions, job_id, owner)  # NotFound, and expiry before anything else
    with sessions.begin() as session:
        if not move(session, job_id, JobStatus.CANCELLING):
            ended = session.scalar(select(Job.status).where(Job.id == job_id))
            raise WrongState(f"job {job_id} has already ended ({ended})")
        move_rows(session, ChunkStatus.CANCELLED, Chunk.job_id == job_id,
                  Chunk.status == ChunkStatus.QUEUED)  # running ones stop by themselves
    settle(sessions, job_id)


def fail_job(sessions: sessionmaker[Session], job_id: str, error: str) -> None:
    """End a job that cannot go on (the embedded `run` crashed), so that it does not stay
    in progress forever: its open chunks close, the job fails with `error`, and `retry`
    can take it up later."""
    with sessions.begin() as session:
        move_rows(session, ChunkStatus.CANCELLED, Chunk.job_id == job_id)
        move(session, job_id, JobStatus.FAILED, error=error)


def retry_job(sessions: sessionmaker[Session], job_id: str, config: Settings) -> list[int]:
    """Make failed requests (except invalid input, which would fail again) and unfinished
    ones pending again, put the job back in progress with a fresh completion window, and
    return the ids of the chunks queued again. Its owner's quotas are checked as for a new
    batch (QuotaExceeded: nothing changes)."""

    get_job_to_change(sessions, job_id)
    with sessions.begin() as session:
        job = session.get_one(Job, job_id, with_for_update=True)  # against a purge
        if job.status not in ENDED:
            raise WrongState(f"job {job_id} is still {job.status}; retry it once it has ended")
        if job.purged_at is not None:
            raise WrongState(f"job {job_id}'s requests were deleted; it cannot be retried")
        retried = move_rows(session, ItemStatus.PENDING, Item.job_id == job_id,
                            Item.chunk_id.is_not(None),  # an invalid line would fail again
                            error_code=None, error_message=None, finished_at=None)
        session.execute(update(Item).where(Item.job_id == job_id, Item.status == ItemStatus.PENDING)
                        .values(attempts=0))
        chunk_ids = [chunk_id for chunk_id in session.scalars(
            select(Item.chunk_id).distinct().where(Item.job_id == job_id,
                                                   Item.status == ItemStatus.PENDING)
            .order_by(Item.chunk_id)) if chunk_id is not None]
        if not chunk_ids:
            raise UserError(f"job {job_id} has nothing to retry: no failed or unfinished "
                            "requests that could succeed")
        move_rows(session, ChunkStatus.QUEUED, Chunk.job_id == job_id,
                  Chunk.chunk_id.in_(chunk_ids))
        job.failed_count -= retried
        job.retries += 1
        job.enqueued_tokens = session.scalar(select(func.coalesce(func.sum(Item.tokens), 0))
                                             .where(Item.job_id == job_id,
                                                    Item.status == ItemStatus.PENDING))
        check_retry(session, job, chunk_ids, config)
        now = time.time()
        window = ({"expires_at": now + window_seconds(job.completion_window)}
                  if job.completion_window else {})
        move(session, job_id, JobStatus.IN_PROGRESS, now=now, error=None,
             output_bytes=None, error_bytes=None,  # measured again when it ends
             **dict.fromkeys(CLEARED_BY_RETRY, None), **window)
        return chunk_ids
