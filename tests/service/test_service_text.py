"""Text the service writes from exceptions (an item's error message, a job's error, a
schedule run's reason, a webhook's error) is stored on SQLite and on PostgreSQL even when
it holds a NUL (PostgreSQL's text refuses it) or a lone surrogate (not UTF-8): each reads
back as U+FFFD (dinfer_batch/storage/service_text.py, ADR 055)."""

import time

import pytest
from sqlalchemy import Text, select, text

from dinfer_batch.config import Settings
from dinfer_batch.formats.results.output import Outcome
from dinfer_batch.jobs.intake import ingest as ingest_module
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.intake.line_check import CheckedLine, LineChecker, TextBatch
from dinfer_batch.jobs.lifecycle import fail_job
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.schedules.beat import start_run
from dinfer_batch.statuses import DeliveryStatus, ItemStatus, JobStatus, RunStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.service_text import ServiceText
from dinfer_batch.storage.tables import (
    Base,
    Item,
    Job,
    ScheduleRun,
    WebhookAttempt,
    WebhookDelivery,
)
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_settings, write_jsonl

BAD = "boom \x00 and \ud800 end"
STORED = "boom \ufffd and \ufffd end"


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def _job(job_id: str) -> Job:
    return Job(id=job_id, status=JobStatus.IN_PROGRESS.value, model="m", queue="q",
               input_file="f", params={}, meta={}, chunk_size=1, created_at=0.0)


def test_an_item_failed_with_a_nul_and_a_lone_surrogate_is_stored(sessions):
    with sessions.begin() as session:
        session.add(_job("j"))
        session.add(Item(job_id="j", line=1, status=ItemStatus.PENDING.value))
    outcome = Outcome(line=1, error_code="engine_error", error_message=BAD)
    assert chunk_state.record(sessions, "j", [outcome]) == 1
    with sessions() as session:
        item = session.get_one(Item, ("j", 1))
    assert (item.status, item.error_message) == (ItemStatus.FAILED, STORED)


def test_a_line_refused_with_a_nul_and_a_lone_surrogate_is_stored(sessions, tmp_path,
                                                                  tiny_checkpoint,
                                                                  monkeypatch):
    """Ingest writes its rows past the column's type (COPY on PostgreSQL). No check's
    message quotes such text today (a client's string holding it is refused as such), so
    a stand-in checker refuses every line with it."""

    class Refusing(LineChecker):
        def __call__(self, batch: TextBatch) -> list[CheckedLine]:
            return [line._replace(request=None, error=BAD) for line in super().__call__(batch)]

    monkeypatch.setattr(ingest_module, "LineChecker", Refusing)
    spec = JobSpec(model=load_model_info(str(tiny_checkpoint), MODELS_DIR), queue="q",
                   chunk_size=1)
    job = ingest(sessions, write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]), spec,
                 env_settings())
    with sessions() as session:
        item = session.get_one(Item, (job.id, 1))
    assert (job.status, item.status, item.error_message) == (JobStatus.FAILED,
                                                             ItemStatus.FAILED, STORED)


def test_a_job_failed_with_a_nul_and_a_lone_surrogate_is_stored(sessions):
    with sessions.begin() as session:
        session.add_all([_job("failed"), _job("noted")])
    fail_job(sessions, "failed", BAD)  # the ORM's UPDATE of a move
    chunk_state.note_error(sessions, "noted", BAD)  # a Core UPDATE
    with sessions() as session:
        failed, noted = session.get_one(Job, "failed"), session.get_one(Job, "noted")
    assert (failed.status, failed.error) == (JobStatus.FAILED, STORED)
    assert noted.error == STORED


def test_a_schedule_run_skipped_with_a_nul_and_a_lone_surrogate_is_stored(sessions):
    # never a file: the run is skipped, naming it; the spec's JSON is written as text, as
    # no client could (the service's JSON encoder writes a lone surrogate as it is)
    spec = '{"input": {"file": "/no/such \\u0000 \\ud800.jsonl"}}'
    with sessions.begin() as session:
        session.execute(text("INSERT INTO schedules (name, spec, trigger_kind, trigger, "
                             "seed_base, same_seeds, overlap, paused, created_at, "
                             "next_run_at) VALUES ('s', :spec, 'every', '1h', 0, false, "
                             "false, false, 0, 0)"), {"spec": spec})
        session.add(run := ScheduleRun(schedule="s", due_at=0.0, created_at=0.0,
                                       status=RunStatus.STARTING.value))
        session.flush()
        run_id = run.id
    run = start_run(sessions, None, run_id, Settings.from_env({}))  # type: ignore[arg-type]
    assert run.status == RunStatus.SKIPPED
    assert run.reason == "input file not found: /no/such \ufffd \ufffd.jsonl"


def test_a_webhook_error_with_a_nul_and_a_lone_surrogate_is_stored(sessions):
    with sessions.begin() as session:
        session.add(WebhookDelivery(id=1, event_id="e", endpoint_id="p", created_at=0.0,
                                    status=DeliveryStatus.PENDING.value, next_attempt_at=0.0))
        session.add(WebhookAttempt(delivery_id=1, attempted_at=time.time(), error=BAD,
                                   seconds=0.0))
    with sessions.begin() as session:
        move_rows(session, DeliveryStatus.FAILED, WebhookDelivery.id == 1, last_error=BAD)
    with sessions() as session:
        assert session.scalar(select(WebhookAttempt.error)) == STORED
        assert session.scalar(select(WebhookDelivery.last_error)) == STORED


def test_every_error_and_reason_column_is_service_text():
    """A new column of errors or reasons, written as plain text, would fail on a NUL."""
    named = [column for table in Base.metadata.tables.values() for column in table.columns
             if isinstance(column.type, Text | ServiceText) and ("error" in column.name
                                                   or column.name == "reason")]
    assert len(named) == 5
    assert [str(c) for c in named if not isinstance(c.type, ServiceText)] == []
