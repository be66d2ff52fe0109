"""The sizes of an ended job's two result files (`output`: the lines that succeeded,
`errors`: the rest), measured once and kept on the job row (`jobs.output_bytes`,
`jobs.error_bytes`, migration 0013), so that a file object (`GET /v1/files/{id}`, the
dashboard) costs one row read however large the file is.

A job is measured right after it ends, outside that transaction: by the worker whose
chunk was the last (on its writer thread: jobs/running/runner.py), or by
`chunk_state.settle` (the cancel or reaper pass that ended it); a job ended another way
(failed at ingest, expired, `fail_job`) is measured by the first read that needs it.
The sizes are stored only while the job is still the same ended job (same status and
retries, not purged), and `retry` clears them."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.fastjson import dumps
from dinfer_batch.jobs.reading.results import outputs
from dinfer_batch.storage.tables import Job


def result_sizes(sessions: sessionmaker[Session], job: Job) -> tuple[int, int]:
    """(output file bytes, error file bytes) of an ended job: stored, else measured."""
    if job.output_bytes is not None and job.error_bytes is not None:
        return job.output_bytes, job.error_bytes
    return measure(sessions, job)


def measure(sessions: sessionmaker[Session], job: Job) -> tuple[int, int]:
    """Count the bytes of the job's result files as `results.result_file_bytes` serves
    them (a page of items at a time) and store them on the job row (the job has
    ended)."""
    good = bad = 0
    for line in outputs(sessions, job):
        size = len(dumps(line).encode()) + 1  # and its newline
        if line["error"]:
            bad += size
        else:
            good += size
    if job.purged_at is None:
        with sessions.begin() as session:
            session.execute(update(Job).where(
                Job.id == job.id, Job.status == job.status, Job.retries == job.retries,
                Job.purged_at.is_(None)).values(output_bytes=good, error_bytes=bad))
    return good, bad


def measure_ended(sessions: sessionmaker[Session], job_id: str) -> None:
    """Measure the job that just ended, unless it has its sizes already."""
    with sessions() as session:
        job = session.get(Job, job_id)
    if job is not None and job.output_bytes is None:
        measure(sessions, job)
