"""The one transitions table (jobs/status.py): a job or a chunk enters a status only from
those the table names, whatever status it is in; an overdue job reads as expired on a
copy, the job read left as it was."""

import time

import pytest
from sqlalchemy import select

from dinfer_batch.jobs.expiry import as_read
from dinfer_batch.jobs.status import CHUNK_SOURCES, JOB_SOURCES, ChunkStatus, JobStatus
from dinfer_batch.jobs.transitions import move, move_chunks
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Chunk, Job


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'moves.db'}"
    db.upgrade(url)
    return db.ready(url)


def _job(status: str, **values) -> Job:
    return Job(id=f"job-{status}", status=status, model="m", queue="q", input_file="f",
               params={}, meta={}, chunk_size=1, created_at=0.0, **values)


def test_a_job_moves_only_from_the_statuses_the_table_names(sessions):
    with sessions.begin() as session:
        session.add_all(_job(status) for status in JobStatus)
    assert JOB_SOURCES[JobStatus.VALIDATING] == ()  # only made so, never entered
    for to, sources in JOB_SOURCES.items():
        if not sources:
            continue
        with sessions.begin() as session:
            moved = {start for start in JobStatus
                     if move(session, f"job-{start}", to, now=7.0)}
            session.rollback()  # every start again for the next target
        assert moved == set(sources), to
    with sessions.begin() as session:
        assert not move(session, "job-completed", JobStatus.CANCELLING)  # it has ended
        assert not move(session, "job-in_progress", JobStatus.COMPLETED)  # not finalized
        assert move(session, "job-in_progress", JobStatus.FINALIZING, now=7.0)
        assert session.scalar(select(Job.finalizing_at).where(Job.id == "job-in_progress")) \
            == 7.0


def test_a_chunk_moves_only_from_the_statuses_the_table_names(sessions):
    with sessions.begin() as session:
        session.add(_job("in_progress"))
        session.add_all(Chunk(job_id="job-in_progress", chunk_id=index, status=status,
                              size=1) for index, status in enumerate(ChunkStatus))
    for to, sources in CHUNK_SOURCES.items():
        with sessions.begin() as session:
            count = move_chunks(session, "job-in_progress", to, worker="w")
            moved = set(session.scalars(select(Chunk.chunk_id).where(Chunk.worker == "w")))
            session.rollback()
        assert count == len(sources)
        assert {list(ChunkStatus)[index] for index in moved} == set(sources), to


def test_an_overdue_job_reads_as_expired_on_a_copy(sessions):
    job = _job("in_progress", expires_at=time.time() - 5, total_count=3, completed_count=1)
    shown = as_read(job)
    assert (shown.status, shown.expired_at, shown.failed_count) == (
        "expired", job.expires_at, 2)
    assert (job.status, job.expired_at) == ("in_progress", None)  # the job read, unchanged
    assert as_read(shown) is shown  # an ended job reads as itself
