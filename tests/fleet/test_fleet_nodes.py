"""A node as an operator runs it, with real processes and default timeouts: a supervisor
with 3 CPU replicas loses one to SIGKILL (restarted; its chunk comes back through the
reaper), stops warm on SIGTERM (chunks in hand go back to the queue at once) and a new
supervisor finishes the job; and Redis restarted empty mid-job (a private redis-server)
loses no work. Every item ends exactly once. The engine is a paced stand-in, so the
tests wait on the service, not on the CPU."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage import registry
from dinfer_batch.storage.tables import Chunk, Item, Worker
from tests.service_helpers import read_jsonl, wait_for, write_jsonl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GOAL_S = 180  # SIGKILL to job completed, with the default 60 s worker timeout


def paced(seconds: float) -> dict[str, str]:
    return {"DINFER_BATCH_ENGINE": "tests.paced_engine:PacedEngine",
            "DINFER_TEST_ITEM_SECONDS": str(seconds), "PYTHONPATH": str(REPO)}


def live(service) -> list[Worker]:
    return registry.live_on_queue(service.sessions(), service.queue, 60)


def submit(service, path: Path, *args: str) -> str:
    """`dinfer-batch submit` in its own process (it reads the broker URL at start); a live
    worker takes the queue, so it warns of nothing."""
    done = subprocess.run([sys.executable, "-m", "dinfer_batch", "submit", str(path), *args],
                          env=os.environ | service.env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    return done.stdout.strip()


def chunks(service, job_id: str) -> list[Chunk]:
    with service.sessions()() as session:
        return list(session.scalars(select(Chunk).where(Chunk.job_id == job_id)))


def finished(service) -> dict[int, float]:
    with service.sessions()() as session:
        return dict(session.execute(select(Item.line, Item.finished_at)
                                    .where(Item.status != "pending")).all())


def assert_every_item_once(service, job_id: str, count: int, tmp_path: Path) -> None:
    job = service.job(job_id)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", count, 0)
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    assert [line["custom_id"] for line in read_jsonl(out)] == [f"c{i}" for i in range(count)]


def test_node_recovers_a_killed_replica_and_stops_warm(sqlite_service, tmp_path):
    service = sqlite_service
    # 2 s an item, 96 items: the other replicas cannot finish the job while the killed one
    # restarts (the SIGTERM below must find a chunk in hand, even on a loaded machine)
    node = service.start_node(tmp_path / "node.log", "--replicas", "3", "--device", "cpu",
                      **paced(2.0))
    wait_for(lambda: len(live(service)) == 3, 180)
    listed = [json.loads(line) for line in service.cli("workers", "--json").output.splitlines()]
    assert sorted(w["name"].split("@")[0] for w in listed) == ["cpu0-tiny", "cpu1-tiny",
                                                                "cpu2-tiny"]
    assert {(w["state"], w["device"], w["model"]) for w in listed} == {
        ("live", "cpu", str(service.model))}
    path = write_jsonl(tmp_path / "in.jsonl",
                       [{"prompt": f"p{i}", "custom_id": f"c{i}"} for i in range(96)])
    job_id = submit(service, path, "--chunk-size", "4")
    assert service.cli("status", job_id).output.strip()

    def busy() -> list[Worker]:
        return [w for w in live(service) if w.job_id == job_id]

    service.wait_job(job_id, lambda j: j.completed_count >= 2 and busy())
    status = service.cli("status", job_id).output
    assert re.search(r"  [123] worker\(s\) on it$", status.strip()), status
    [victim, *_] = busy()
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: any(w.name == victim.name and w.pid != victim.pid
                         for w in live(service)), 90)  # restarted under its name

    wait_for(lambda: busy(), 60)  # a live replica holds a chunk: stop the node now
    node.send_signal(signal.SIGTERM)
    assert node.wait(120) == 0
    log = (tmp_path / "node.log").read_text()
    assert f"{victim.name} exited with code -9" in log
    assert "queued again" in log  # a chunk in hand went back at once
    with service.sessions()() as session:
        rows = session.scalars(select(Worker)).all()
    assert {w.id for w in rows if w.stopped_at is None} == {victim.id}  # others stopped
    for worker in rows:
        with pytest.raises(ProcessLookupError):
            os.kill(worker.pid, 0)
    assert {c.worker for c in chunks(service, job_id) if c.status == "running"} <= {victim.id}
    before = finished(service)

    service.start_node(tmp_path / "node2.log", "--replicas", "1", "--device", "cpu",
               **paced(0.05))
    service.wait_job(job_id, lambda j: j.status in ENDED, timeout=GOAL_S)
    assert time.monotonic() - killed_at < GOAL_S
    assert_every_item_once(service, job_id, 96, tmp_path)
    after = finished(service)
    assert {line: after[line] for line in before} == before  # none written twice


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(port: int, workdir: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"],
                                    capture_output=True).returncode == 0, 30)
    return process


def test_redis_restarted_empty_mid_job_loses_nothing(sqlite_service, tmp_path):
    service = sqlite_service
    port = free_port()
    redis_server = start_redis(port, tmp_path)
    try:
        service.env["DINFER_BATCH_BROKER_URL"] = f"redis://127.0.0.1:{port}/0"
        service.start_worker(tmp_path / "worker.log", **paced(0.3))
        path = write_jsonl(tmp_path / "in.jsonl",
                           [{"prompt": f"p{i}", "custom_id": f"c{i}"} for i in range(30)])
        job_id = submit(service, path, "--chunk-size", "3")
        service.wait_job(job_id, lambda j: j.completed_count >= 4)

        redis_server.terminate()  # no persistence: every message is gone
        redis_server.wait(30)
        time.sleep(10)
        assert service.job(job_id).completed_count < 30
        redis_server = start_redis(port, tmp_path)  # empty

        job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=120)
        assert job.status == "completed", (tmp_path / "worker.log").read_text()[-3000:]
        assert_every_item_once(service, job_id, 30, tmp_path)
        # the reaper gave the empty Redis the permits it lacked
        assert "permit(s) the queues lacked" in (tmp_path / "worker.log").read_text()
    finally:
        service.stop_workers()
        redis_server.terminate()
        redis_server.wait(30)


def test_submit_warns_when_no_live_worker_takes_the_queue(sqlite_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "p"}])
    result = sqlite_service.cli("submit", path)
    assert result.exit_code == 0
    assert f"warning: no live worker takes queue {sqlite_service.queue!r}" in result.output
