"""The operations a user asks of an existing job: retry, which also talks to the broker
(its chunks are queued again and the queue's permits topped up), and cancel, which only
writes SQL (a permit names no chunk, so nothing is revoked: a claim skips a cancelled
job's closed chunks, docs/adr/012-dispatch-and-quotas.md) and returns the job as it is
then. `dinfer-batch cancel/retry`, the HTTP API and the dashboard call these; making a
job is jobs.create."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.lifecycle import cancel_job, retry_job
from dinfer_batch.jobs.running.dispatch import top_up
from dinfer_batch.storage.tables import Job

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker


def cancel(sessions: sessionmaker[Session], job_id: str, owner: str | None = None) -> Job:
    """Cancel the job; returns it as it is now."""
    cancel_job(sessions, job_id, owner)
    return get_job(sessions, job_id, owner)


def retry(sessions: sessionmaker[Session], broker: Broker, job_id: str,
          config: Settings) -> int:
    """Queue the job's failed and unfinished requests again (within `config`'s quotas)
    and top up its queue's permits on `broker`; returns the chunks queued."""
    chunks = retry_job(sessions, job_id, config)
    top_up(sessions, broker, get_job(sessions, job_id).queue, config.worker_timeout)
    return len(chunks)
