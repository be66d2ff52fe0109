"""The operations on an existing job that also talk to the broker: cancel (revoke the
queued chunks) and retry (queue them again). `dinfer-batch cancel/retry` and the HTTP
API both call these; making a job is jobs.create."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.lifecycle import cancel_job, get_job, retry_job
from dinfer_batch.storage.tables import Job


def cancel(sessions: sessionmaker[Session], job_id: str, owner: str | None = None) -> Job:
    """Cancel the job and revoke its queued chunks; returns the job as it is now."""
    from workers.tasks import revoke

    revoke(cancel_job(sessions, job_id, owner))
    return get_job(sessions, job_id, owner)


def retry(sessions: sessionmaker[Session], job_id: str) -> int:
    """Queue the job's failed and unfinished requests again; returns the chunks queued."""
    from workers.tasks import enqueue

    task_ids = retry_job(sessions, job_id)
    enqueue(job_id, task_ids, get_job(sessions, job_id).queue)
    return len(task_ids)
