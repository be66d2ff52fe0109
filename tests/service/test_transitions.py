"""The transitions tables (dinfer_batch/statuses.py): a row of any status column enters a
status only from those its table names, whatever status it is in, whether moved as a set
(storage/moves.move_rows) or row by row (move_each); an overdue job reads as expired on a
copy, the job read left as it was."""

import time

import pytest
from sqlalchemy import inspect, select

from dinfer_batch.jobs.expiry import as_read
from dinfer_batch.jobs.transitions import move
from dinfer_batch.statuses import (
    ITEM_SOURCES,
    JOB_SOURCES,
    ChunkStatus,
    DeliveryStatus,
    ItemStatus,
    JobStatus,
    RunStatus,
    Status,
)
from dinfer_batch.storage import db
from dinfer_batch.storage.moves import TABLES, move_each, move_rows
from dinfer_batch.storage.tables import Base, Chunk, Item, Job, ScheduleRun, WebhookDelivery


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'moves.db'}"
    db.upgrade(url)
    return db.ready(url)


def _job(status: str, **values) -> Job:
    return Job(id=f"job-{status}", status=status, model="m", queue="q", input_file="f",
               params={}, meta={}, chunk_size=1, created_at=0.0, **values)


def _row(status: Status, key: int) -> Base:
    """A row of `status`'s table in that status, `key` telling it from the others."""
    if isinstance(status, JobStatus):
        return _job(status)
    if isinstance(status, ChunkStatus):
        return Chunk(job_id="job-in_progress", chunk_id=key, status=status, size=1)
    if isinstance(status, ItemStatus):
        return Item(job_id="job-in_progress", line=key, status=status)
    if isinstance(status, RunStatus):
        return ScheduleRun(id=key + 1, schedule="s", due_at=float(key), status=status,
                           created_at=0.0)
    return WebhookDelivery(id=key + 1, event_id=f"e{key}", endpoint_id="p", status=status,
                           next_attempt_at=0.0, created_at=0.0)


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


@pytest.mark.parametrize("vocabulary", list(TABLES), ids=lambda v: v.__name__)
def test_a_row_moves_only_from_the_statuses_its_table_names(sessions, vocabulary):
    model, sources_of = TABLES[vocabulary]
    with sessions.begin() as session:
        session.add_all(_row(status, index) for index, status in enumerate(vocabulary))
    for to in vocabulary:
        with sessions.begin() as session:
            before = {inspect(row).identity: row.status for row in session.scalars(select(model))}
            count = move_rows(session, to)
            session.expire_all()
            after = {inspect(row).identity: row.status for row in session.scalars(select(model))}
            session.rollback()  # every start again for the next target
        assert count == len(sources_of[to]), to
        assert {before[key] for key in before if before[key] != after[key]} \
            == set(sources_of[to]) - {to}, to
        assert set(after.values()) - set(before.values()) == set()


def test_the_moves_no_table_allows_do_not_happen(sessions):
    with sessions.begin() as session:
        session.add_all([_row(ItemStatus.COMPLETED, 1), _row(RunStatus.CREATED, 1),
                         _row(DeliveryStatus.FAILED, 1), _row(ChunkStatus.DONE, 1)])
    with sessions.begin() as session:
        assert not move_rows(session, ItemStatus.FAILED)  # a result is written once
        assert not move_rows(session, RunStatus.FAILED)  # a run that made its job
        assert not move_rows(session, DeliveryStatus.DELIVERED)  # a given-up delivery
        assert not move_rows(session, ChunkStatus.CANCELLED)  # a closed chunk
        assert not move_rows(session, DeliveryStatus.PENDING)  # made so, never entered
    assert ITEM_SOURCES[ItemStatus.PENDING] == (ItemStatus.FAILED,)  # only a retry


def test_rows_moved_one_by_one_move_only_from_the_sources(sessions):
    """An item's result is written by its key, and only while the item is pending."""
    with sessions.begin() as session:
        session.add_all([_row(ItemStatus.PENDING, 1), _row(ItemStatus.COMPLETED, 2)])
    with sessions.begin() as session:
        move_each(session, ItemStatus.FAILED,
                  [{"job_id": "job-in_progress", "line": line, "error_code": "x"}
                   for line in (1, 2)])
        move_each(session, ItemStatus.COMPLETED, [])  # nothing to write: no statement
    with sessions() as session:
        assert session.execute(select(Item.line, Item.status, Item.error_code)
                               .order_by(Item.line)).all() == [
            (1, "failed", "x"), (2, "completed", None)]


def test_an_overdue_job_reads_as_expired_on_a_copy(sessions):
    job = _job("in_progress", expires_at=time.time() - 5, total_count=3, completed_count=1)
    shown = as_read(job)
    assert (shown.status, shown.expired_at, shown.failed_count) == (
        "expired", job.expires_at, 2)
    assert (job.status, job.expired_at) == ("in_progress", None)  # the job read, unchanged
    assert as_read(shown) is shown  # an ended job reads as itself
