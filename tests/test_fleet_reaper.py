"""The reaper on a real database (SQLite, then PostgreSQL) and the real Redis: dead
workers' chunks come back once however many reapers run, live workers keep theirs, and
messages Redis lost are published again from SQL."""

import time
import uuid

import pytest
import redis
from sqlalchemy import select, update

from dinfer_batch.fleet import registry
from dinfer_batch.fleet.reaper import Reaper
from dinfer_batch.jobs.chunk_state import claim, release
from dinfer_batch.jobs.ingest import ingest
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Chunk, Item, Worker
from tests.service_helpers import REDIS_URL, write_jsonl
from workers.broker import MARKER, Broker
from workers.tasks import enqueue

pytest_plugins = ["tests.service_fixtures"]
pytestmark = pytest.mark.integration  # the real Redis


@pytest.fixture
def queue():
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    redis.Redis.from_url(REDIS_URL).delete(name, MARKER.format(queue=name))


@pytest.fixture
def sessions(database_url, monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_WORKER_TIMEOUT", "5")
    db.upgrade(database_url)
    return db.ready(database_url)


def make_job(sessions, tmp_path, model, queue, chunks):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"p{i}"} for i in range(2 * chunks)])
    return ingest(sessions, path, JobSpec(model=load_model_info(str(model)), queue=queue,
                                          chunk_size=2))


def chunk_states(sessions, job_id):
    with sessions() as session:
        return {c.chunk_id: (c.status, c.worker) for c in session.scalars(
            select(Chunk).where(Chunk.job_id == job_id))}


def age(sessions, worker_id, seconds):
    """Make a worker's heartbeat and its claims `seconds` old."""
    then = time.time() - seconds
    with sessions.begin() as session:
        session.execute(update(Worker).where(Worker.id == worker_id).values(heartbeat_at=then))
        session.execute(update(Chunk).where(Chunk.worker == worker_id).values(started_at=then))


def test_dead_workers_chunk_comes_back_once(sessions, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=3)
    for worker in ("dead/1", "live/1"):
        registry.register(sessions, worker, worker, "tiny", "cpu", [queue])
    assert claim(sessions, job.id, 0, "dead/1", "cpu")
    assert claim(sessions, job.id, 1, "live/1", "cpu")
    age(sessions, "dead/1", 10)
    broker = Broker(REDIS_URL)
    broker.mark_checked(queue)  # the messages of this test are not lost

    # two reapers at once: the chunk is queued again and published once
    assert [Reaper(sessions, broker).run_once().dead for _ in range(2)] == [1, 0]
    assert chunk_states(sessions, job.id) == {0: ("queued", None), 1: ("running", "live/1"),
                                              2: ("queued", None)}
    assert broker.chunks_with_messages(queue) == {(job.id, 0)}
    # a live worker's chunk is not taken over by a duplicate message; a reaped one is
    assert claim(sessions, job.id, 1, "other/1", "cpu") is None
    items = claim(sessions, job.id, 0, "other/1", "cpu")
    assert [item.attempts for item in items] == [2, 2]  # the dead worker's attempt counts


def test_warm_release_gives_the_attempt_back(sessions, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=1)
    assert claim(sessions, job.id, 0, "w/1", "cpu")
    assert not release(sessions, job.id, 0, "w/2")  # not its chunk
    assert release(sessions, job.id, 0, "w/1")
    assert chunk_states(sessions, job.id) == {0: ("queued", None)}
    with sessions() as session:
        assert set(session.scalars(select(Item.attempts))) == {0}


def test_lost_messages_are_published_again(sessions, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=3)
    enqueue(job.id, {0: f"{job.id}.0.0", 1: f"{job.id}.1.0"}, queue)  # chunk 2's is lost
    broker, reaper = Broker(REDIS_URL), Reaper(sessions, Broker(REDIS_URL))
    assert reaper.run_once().lost == 1
    assert broker.chunks_with_messages(queue) == {(job.id, c) for c in range(3)}
    assert reaper.run_once().lost == 0  # checked: nothing more until Redis loses data

    registry.register(sessions, "live/1", "live/1", "tiny", "cpu", [queue])
    assert claim(sessions, job.id, 0, "live/1", "cpu")
    redis.Redis.from_url(REDIS_URL).delete(queue, MARKER.format(queue=queue))  # "restart"
    assert reaper.run_once().lost == 2  # the live worker's chunk needs no message
    assert broker.chunks_with_messages(queue) == {(job.id, 1), (job.id, 2)}
