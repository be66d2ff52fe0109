"""The job operations that also talk to the broker: submit (ingest, then one message per
chunk), cancel (revoke the queued chunks) and retry (queue them again). `dinfer-batch
submit/cancel/retry` and the HTTP API both call these."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import Unavailable
from dinfer_batch.jobs.ingest import JobSpec, ingest
from dinfer_batch.jobs.lifecycle import cancel_job, chunk_task_id, get_job, retry_job
from dinfer_batch.storage.tables import Job


def submit_job(sessions: sessionmaker[Session], path: Path, spec: JobSpec) -> Job:
    """Ingest the file into a job and queue its chunks; Unavailable when the broker cannot
    be reached (checked first, so nothing is written then)."""
    from workers.tasks import check_broker, enqueue

    try:
        check_broker()
    except ConnectionError as exc:
        raise Unavailable(f"{exc} (is Redis running? set DINFER_BATCH_BROKER_URL)") from exc
    job = ingest(sessions, path, spec)
    enqueue(job.id, {c: chunk_task_id(job, c) for c in range(job.chunk_count)}, job.queue)
    return job


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
