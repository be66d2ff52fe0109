"""The reaper on a real database (SQLite, then PostgreSQL) and the real Redis: dead
workers' chunks come back once however many reapers run, live workers keep theirs, and
permits Redis lost are published again from SQL."""

import time

import pytest
import redis
from sqlalchemy import select, update

from dinfer_batch.fleet.reaper import Reaper
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.running.chunk_state import claim, release
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db, registry
from dinfer_batch.storage.tables import Chunk, Item, Worker
from dinfer_models import MODELS_DIR
from tests.service_helpers import REDIS_URL, env_broker, env_settings, write_jsonl

pytestmark = pytest.mark.integration  # the real Redis
WORKER_TIMEOUT = 5  # seconds: the workers' and the reaper's, in these tests


@pytest.fixture
def sessions(database_url, monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_WORKER_TIMEOUT", str(WORKER_TIMEOUT))
    db.upgrade(database_url)
    return db.ready(database_url)


def make_job(sessions, tmp_path, model, queue, chunks):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"p{i}"} for i in range(2 * chunks)])
    spec = JobSpec(model=load_model_info(str(model), MODELS_DIR), queue=queue, chunk_size=2)
    return ingest(sessions, path, spec, env_settings())


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
    assert claim(sessions, job.id, 0, "dead/1", "cpu", WORKER_TIMEOUT)
    assert claim(sessions, job.id, 1, "live/1", "cpu", WORKER_TIMEOUT)
    age(sessions, "dead/1", 10)

    # two reapers at once: the chunk is queued again once; one permit for the one live
    # worker waits in Redis
    with env_broker() as broker:
        reaper = Reaper(sessions, broker, env_settings().worker_timeout)
        assert [reaper.run_once().dead for _ in range(2)] == [1, 0]
    assert chunk_states(sessions, job.id) == {0: ("queued", None), 1: ("running", "live/1"),
                                              2: ("queued", None)}
    assert redis.Redis.from_url(REDIS_URL).llen(queue) == 1
    # a live worker's chunk is not taken over by a duplicate message; a reaped one is
    assert claim(sessions, job.id, 1, "other/1", "cpu", WORKER_TIMEOUT) is None
    items = claim(sessions, job.id, 0, "other/1", "cpu", WORKER_TIMEOUT)
    # as the claim found them: the dead worker's attempt counts, this claim's does not yet
    # (suspects count theirs one at a time, in the engine)
    assert [item.attempts for item in items] == [1, 1]
    with sessions() as session:
        assert set(session.scalars(select(Item.attempts).where(Item.chunk_id == 0))) == {1}


def test_warm_release_gives_the_attempt_back(sessions, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=1)
    items = claim(sessions, job.id, 0, "w/1", "cpu", WORKER_TIMEOUT)
    assert [item.attempts for item in items] == [0, 0]  # as the claim found them
    lines = [item.line for item in items]
    assert not release(sessions, job.id, 0, "w/2", lines)  # not its chunk
    assert release(sessions, job.id, 0, "w/1", lines)
    assert chunk_states(sessions, job.id) == {0: ("queued", None)}
    with sessions() as session:
        assert set(session.scalars(select(Item.attempts))) == {0}


def test_permits_redis_lost_are_published_again(sessions, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=3)
    broker = redis.Redis.from_url(REDIS_URL)
    with env_broker() as permits:
        reaper = Reaper(sessions, permits, env_settings().worker_timeout)
        assert reaper.run_once().published == 1  # no live worker: a window of one
        assert reaper.run_once().published == 0 and broker.llen(queue) == 1
        broker.delete(queue)  # Redis restarted empty
        assert reaper.run_once().published == 1 and broker.llen(queue) == 1

        for worker in ("w/1", "w/2", "w/3", "w/4"):
            registry.register(sessions, worker, worker, "tiny", "cpu", [queue])
        assert claim(sessions, job.id, 0, "w/1", "cpu", WORKER_TIMEOUT)
        # four live workers, but two chunks left to run: two permits
        assert reaper.run_once().published == 1 and broker.llen(queue) == 2
