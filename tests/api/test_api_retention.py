"""Expiry through the official `openai` client against a real `dinfer-batch api`, worker
and `dinfer-batch beat`, on SQLite and PostgreSQL: an upload with `expires_after` and a
batch's results with `output_expires_after` are gone (404) once expired and deleted by
beat (the bytes off the disk, the items out of SQL); DELETE of a result file deletes the
batch's results; everything else stays."""

from pathlib import Path

import openai
import pytest
from sqlalchemy import func, select, update

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage import tables
from dinfer_batch.storage.tables import Item, Job
from tests.beat_helpers import start_beat
from tests.service_helpers import wait_for, write_jsonl

pytestmark = pytest.mark.integration

HOUR = {"anchor": "created_at", "seconds": 3600}


def _items(sessions, job_id):
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Item)
                              .where(Item.job_id == job_id))


def test_expired_uploads_and_results_are_deleted_and_nothing_else(api, tmp_path):
    client, service = api.client(), api.service
    sessions = service.sessions()
    path = write_jsonl(tmp_path / "in.jsonl", [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": f"add {i} 1=", "max_tokens": 8, "block_length": 8}}
        for i in range(4)])
    expiring = client.files.create(file=path.open("rb"), purpose="batch", expires_after=HOUR)
    kept = client.files.create(file=path.open("rb"), purpose="batch")
    assert expiring.expires_at == expiring.created_at + 3600 and kept.expires_at is None
    for bad in ({"anchor": "created_at", "seconds": 10}, {"anchor": "last_used", "seconds": 4000}):
        with pytest.raises(openai.BadRequestError, match="expires_after"):
            client.files.create(file=path.open("rb"), purpose="batch", expires_after=bad)
    with pytest.raises(openai.BadRequestError, match="output_expires_after"):
        client.batches.create(input_file_id=kept.id, endpoint="/v1/completions",
                              completion_window="24h",
                              output_expires_after={"anchor": "created_at", "seconds": 5})

    service.start_worker(tmp_path / "worker.log")
    short, long, deleted = (client.batches.create(
        input_file_id=kept.id, endpoint="/v1/completions", completion_window="24h",
        **({"output_expires_after": HOUR} if n == 0 else {})) for n in range(3))
    for batch in (short, long, deleted):
        wait_for(lambda b=batch: client.batches.retrieve(b.id).status in ENDED, 120, poll=0.3)
    short, long, deleted = (client.batches.retrieve(b.id) for b in (short, long, deleted))
    assert short.status == "completed" and short.model_extra["output_expires_after"] == HOUR
    assert client.files.retrieve(short.output_file_id).expires_at == short.completed_at + 3600

    with sessions.begin() as session:  # an hour later for the expiring ones
        session.execute(update(tables.File).where(tables.File.id == expiring.id)
                        .values(expires_at=tables.File.created_at - 1))
        session.execute(update(Job).where(Job.id == short.id)
                        .values(completed_at=Job.completed_at - 3601))
    for gone in (expiring.id, short.output_file_id):  # gone for readers at once
        with pytest.raises(openai.NotFoundError):
            client.files.content(gone)
    assert [f.id for f in client.files.list()] == [kept.id]
    with sessions() as session:
        stored = Path(session.get_one(tables.File, expiring.id).path)
    assert stored.is_file()

    assert client.files.delete(deleted.output_file_id).deleted  # DELETE of a result file
    assert _items(sessions, deleted.id) == 0
    with pytest.raises(openai.NotFoundError):
        client.files.content(deleted.output_file_id)
    assert client.batches.retrieve(deleted.id).request_counts.completed == 4

    beat = start_beat(service, tmp_path / "beat.log", "--retention-interval", "0.2")
    wait_for(lambda: not stored.exists() and _items(sessions, short.id) == 0, 60)
    assert beat.poll() is None
    with sessions() as session:
        assert session.get(tables.File, expiring.id) is None
        kept_path = Path(session.get_one(tables.File, kept.id).path)
    assert kept_path.is_file() and _items(sessions, long.id) == 4
    assert client.files.content(long.output_file_id).read().count(b"\n") == 4
    assert client.batches.retrieve(short.id).request_counts.completed == 4
    log = (tmp_path / "beat.log").read_text()
    assert f"file {expiring.id} expired" in log and f"job {short.id} purged, 4 request" in log
