"""The fleet through PgBouncer in transaction pooling (docs/fleet.md), with real worker
processes on the test's own PostgreSQL and PgBouncer: a worker killed mid-job, PgBouncer
restarted mid-job, each ending with every item written exactly once; and a worker's
connection budget (DINFER_BATCH_DB_POOL_SIZE + DB_MAX_OVERFLOW) counted from PostgreSQL's
own `pg_stat_activity`, never from our counters."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Item
from tests.private_pgbouncer import PrivatePgBouncer
from tests.private_postgres import PrivatePostgres
from tests.service_fixtures import _service
from tests.service_helpers import Service, read_jsonl, write_jsonl

pytestmark = pytest.mark.integration

# 50 ms an engine call of 4 items, results written as they land: a job of a few seconds
PACED = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
         "STAND_IN_SECONDS_PER_CALL": "0.05", "DINFER_BATCH_ENGINE_BATCH": "4",
         "DINFER_BATCH_WORKER_TIMEOUT": "5", "DINFER_BATCH_HEARTBEAT": "1"}


@pytest.fixture
def bounced_service(private_pgbouncer: PrivatePgBouncer,
                    tiny_checkpoint: Path) -> Iterator[Service]:
    yield from _service(private_pgbouncer.url, tiny_checkpoint)


def submit(service: Service, tmp_path: Path, count: int) -> str:
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(count)]
    result = service.cli("submit", write_jsonl(tmp_path / "in.jsonl", lines),
                         "--chunk-size", "20")
    assert result.exit_code == 0, result.output
    return result.output.strip()


def assert_every_item_once(service: Service, job_id: str, count: int, tmp_path: Path) -> None:
    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=120)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", count, 0)
    with service.sessions()() as session:
        statuses = session.scalars(select(Item.status).where(Item.job_id == job_id)).all()
    assert statuses == ["completed"] * count  # the counters were not doubled
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    assert [line["custom_id"] for line in read_jsonl(out)] == [f"c{i}" for i in range(count)]


def test_a_worker_killed_mid_job_through_pgbouncer(bounced_service, private_pgbouncer,
                                                   tmp_path):
    service = bounced_service
    victim = service.start_worker(tmp_path / "victim.log", **PACED)
    job_id = submit(service, tmp_path, 300)
    service.wait_job(job_id, lambda j: j.completed_count >= 30, timeout=60)
    os.kill(victim.pid, signal.SIGKILL)  # mid-chunk, maybe mid-transaction
    victim.wait(10)
    service.start_worker(tmp_path / "heir.log", **PACED)
    assert_every_item_once(service, job_id, 300, tmp_path)
    # PgBouncer gave the killed client's server connection back: nobody waits for one
    assert all(pool["cl_waiting"] == 0 for pool in private_pgbouncer.show("POOLS"))


def test_pgbouncer_restarted_mid_job_loses_and_doubles_nothing(bounced_service,
                                                                private_pgbouncer, tmp_path):
    service, log = bounced_service, tmp_path / "worker.log"
    service.start_worker(log, **PACED)
    job_id = submit(service, tmp_path, 300)
    service.wait_job(job_id, lambda j: j.completed_count >= 30, timeout=60)
    private_pgbouncer.stop()  # every client connection cut, mid-transaction or not
    time.sleep(3)
    private_pgbouncer.start()
    assert_every_item_once(service, job_id, 300, tmp_path)
    assert "database unreachable, retrying" in log.read_text()


def held_connections(server: PrivatePostgres, name: str, stop: threading.Event,
                     seen: list[int]) -> None:
    """Sample, every 20 ms until `stop`, how many server connections PostgreSQL counts for
    the clients named `name` (their application_name)."""
    with psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
                         autocommit=True) as watcher:
        while not stop.wait(0.02):
            seen.append(watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                        "application_name = %s", [name]).fetchone()[0])


@pytest.mark.parametrize("pool_size, overflow", [("2", "0"), ("1", "0")])
def test_a_worker_holds_no_more_server_connections_than_its_budget(
        private_postgres, private_postgres_service, tmp_path, pool_size, overflow):
    """Heartbeats every 0.2 s, reaper passes, claims, result writes of 4 items at a time
    and top-ups on their threads at once: PostgreSQL never sees the worker hold more
    connections than DINFER_BATCH_DB_POOL_SIZE + DB_MAX_OVERFLOW. (SQLAlchemy's default
    pool, 5 + 10, let this worker hold 2 here, up to 15 under load.)"""
    service = private_postgres_service
    seen: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=held_connections,
                               args=(private_postgres, "budgeted", stop, seen))
    watcher.start()
    try:
        named = f"{private_postgres.url}?application_name=budgeted"
        service.start_worker(tmp_path / "worker.log", **PACED | {
            "DINFER_BATCH_HEARTBEAT": "0.2", "DINFER_BATCH_DATABASE_URL": named,
            "DINFER_BATCH_DB_POOL_SIZE": pool_size, "DINFER_BATCH_DB_MAX_OVERFLOW": overflow})
        assert_every_item_once(service, submit(service, tmp_path, 200), 200, tmp_path)
    finally:
        stop.set()
        watcher.join()
    # the worker's threads overlap enough to use the whole budget, and never more
    assert len(seen) > 100
    assert max(seen) == int(pool_size) + int(overflow), seen


def test_pgbouncer_takes_a_thousand_workers_at_once(private_pgbouncer: PrivatePgBouncer):
    """A fleet of 1,000 workers opens more client connections than the 1,024 files a
    process may hold by default (runuser's session): the private PgBouncer, as the
    deployed one, is started with room for them, so none times out connecting."""
    clients = []
    try:
        for _ in range(1100):
            clients.append(psycopg.connect(
                host="127.0.0.1", port=private_pgbouncer.port, user="postgres",
                dbname="postgres", connect_timeout=10, prepare_threshold=None))
        assert clients[-1].execute("SELECT 1").fetchone() == (1,)
    finally:
        for client in clients:
            client.close()
