"""Retention with real SQLite and PostgreSQL: `dinfer-batch delete` removes one ended job's
requests and results and nothing else (refused while a job runs); beat's retention pass
purges ended jobs older than DINFER_BATCH_RETENTION_DAYS in bounded transactions, never a
running one, and finishes a purge cut short."""

import logging
import time

import pytest
from sqlalchemy import event, func, select, update

from dinfer_batch.errors import UserError
from dinfer_batch.jobs import retention
from dinfer_batch.jobs.create import make_spec
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.lifecycle import cancel_job
from dinfer_batch.jobs.reading.view import job_object
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.jobs.spec import JobOptions
from dinfer_batch.statuses import ChunkStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import File, Item, Job
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_settings, write_jsonl

pytestmark = pytest.mark.integration


def _job(sessions, model, tmp_path, lines=3, end=True):
    spec = make_spec(str(model), {"max_tokens": 8, "block_length": 8},
                     JobOptions(queue="q", chunk_size=2), MODELS_DIR)
    path = write_jsonl(tmp_path / f"{time.monotonic()}.jsonl",
                       [{"prompt": f"add {i} 1="} for i in range(lines)])
    job = ingest(sessions, path, spec, env_settings())
    if end:
        chunk_state.claim(sessions, job.id, 0, "w", "cpu", 60)
        chunk_state.record(sessions, job.id, [chunk_state.Outcome(line=1, text="1")])
        cancel_job(sessions, job.id)
        chunk_state.finish(sessions, job.id, 0, ChunkStatus.CANCELLED, chunk_state.ChunkMetrics())
    return job


def _items(sessions, job_id):
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Item)
                              .where(Item.job_id == job_id))


def test_delete_removes_one_ended_jobs_requests_and_results(service, tmp_path):
    sessions = service.sessions()
    running = _job(sessions, service.model, tmp_path, end=False)
    first, second = (_job(sessions, service.model, tmp_path) for _ in range(2))
    assert service.job(first.id).status == "cancelled"

    refused = service.cli("delete", running.id)
    assert refused.exit_code == 2 and "still in_progress; cancel it first" in refused.output
    result = service.cli("delete", first.id)
    assert result.exit_code == 0 and "3 request(s) and result(s) deleted" in result.output
    assert [_items(sessions, j.id) for j in (running, first, second)] == [3, 0, 3]

    shown = job_object(service.job(first.id))  # what `status --json` prints
    assert shown["purged_at"] is not None and shown["request_counts"] == {
        "total": 3, "completed": 1, "failed": 0}
    gone = service.cli("results", first.id)
    assert gone.exit_code == 2 and "requests and results were deleted" in gone.output
    again = service.cli("retry", first.id)
    assert again.exit_code == 2 and "cannot be retried" in again.output
    assert service.cli("delete", first.id).exit_code == 0  # nothing left: still fine
    assert service.cli("delete", "batch_nope").exit_code == 2
    assert service.cli("results", second.id).exit_code == 0


def test_retention_purges_old_ended_jobs_in_bounded_batches(database_url, tiny_checkpoint,
                                                            tmp_path, monkeypatch, caplog):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    old, recent = (_job(sessions, tiny_checkpoint, tmp_path, lines=5) for _ in range(2))
    old_running = _job(sessions, tiny_checkpoint, tmp_path, end=False)
    cut_short = _job(sessions, tiny_checkpoint, tmp_path)
    three_days_ago = time.time() - 3 * 86400
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id.in_([old.id, old_running.id])).values(
            created_at=three_days_ago, cancelled_at=three_days_ago))
        session.execute(update(Job).where(Job.id == old_running.id).values(cancelled_at=None))
        session.execute(update(Job).where(Job.id == cut_short.id)
                        .values(purged_at=time.time()))
    monkeypatch.setattr(retention, "PURGE_ROWS", 2)
    deletes = []
    engine = sessions.kw["bind"]  # the engine the pass writes through

    def count(_conn, _cursor, statement, *_args):
        if statement.startswith("DELETE FROM items"):
            deletes.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with caplog.at_level(logging.INFO, logger="dinfer_batch.retention"):
            # off by default: cut_short only
            assert retention.retention_pass(sessions, env_settings().retention_days) == 1
            assert _items(sessions, cut_short.id) == 0 and _items(sessions, old.id) == 5
            monkeypatch.setenv("DINFER_BATCH_RETENTION_DAYS", "2")
            assert retention.retention_pass(sessions, env_settings().retention_days) == 1
            assert retention.retention_pass(sessions, env_settings().retention_days) == 0
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert [_items(sessions, j.id) for j in (old, recent, old_running)] == [0, 5, 3]
    assert len(deletes) == 2 + 3  # cut_short: 3 items, old: 5, at most 2 per transaction
    with sessions() as session:
        kept = session.get_one(Job, old.id)
    assert kept.purged_at is not None and (kept.total_count, kept.completed_count) == (5, 1)
    purged = [r.message for r in caplog.records if "purged" in r.message]
    assert len(purged) == 2 and old.id in purged[1] and "DINFER_BATCH_RETENTION_DAYS" in purged[1]
    monkeypatch.setenv("DINFER_BATCH_RETENTION_DAYS", "soon")  # refused as the process starts
    with pytest.raises(UserError, match="DINFER_BATCH_RETENTION_DAYS='soon' must be"):
        env_settings()


def test_an_expired_upload_whose_bytes_beat_cannot_see_is_kept_for_a_beat_that_can(
        database_url, tmp_path, caplog):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    here, elsewhere = tmp_path / "file-here", tmp_path / "other-machine" / "file-there"
    here.write_text("{}\n")
    with sessions.begin() as session:
        for path, expires_at in ((here, time.time() - 1), (elsewhere, time.time() - 1),
                                 (tmp_path / "file-later", time.time() + 3600)):
            session.add(File(id=path.name, owner="alice", filename="in.jsonl", purpose="batch",
                             bytes=3, path=str(path), created_at=time.time() - 7200,
                             expires_at=expires_at))
    with caplog.at_level(logging.INFO, logger="dinfer_batch.retention"):
        assert retention.retention_pass(sessions, env_settings().retention_days) == 1
    with sessions() as session:
        left = sorted(session.scalars(select(File.id)))
    assert left == ["file-later", "file-there"] and not here.exists()
    assert "not on this machine" in caplog.text and "file file-here expired" in caplog.text
