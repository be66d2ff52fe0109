"""A tensor-parallel replica in the service: `dinfer-batch worker --replicas 1 --device
cpu --tensor-parallel 2` under its supervisor, on the real Redis, gives the output lines
of a one-rank run; a rank SIGKILLed mid-job takes the replica down, the supervisor
restarts it and the job completes with every item exactly once."""

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Chunk, Item, Worker
from tests.service.test_service_workers import ONE_PER_CALL, SLOW, submit
from tests.service_helpers import Service, read_jsonl, wait_for, write_jsonl
from tests.tensor_parallel_models import write_family

pytestmark = pytest.mark.integration


@pytest.fixture
def tiny_checkpoint(tmp_path: Path) -> Path:
    """The service's model: tiny LLaDA whose dimensions divide by 2 ranks."""
    return write_family(tmp_path / "llada", "llada")


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def workers(service: Service) -> list[Worker]:
    with service.sessions()() as session:
        return list(session.scalars(select(Worker)))


def finished(service: Service, job_id: str) -> dict[int, float]:
    with service.sessions()() as session:
        return dict(session.execute(select(Item.line, Item.finished_at).where(
            Item.job_id == job_id, Item.status != "pending")).all())


def answers(path: Path) -> list[tuple[str, str]]:
    return [(line["custom_id"], line["response"]["body"]["choices"][0]["text"])
            for line in read_jsonl(path)]


def test_a_killed_rank_restarts_the_replica_and_every_item_lands_once(sqlite_service, tmp_path):
    service = sqlite_service
    lines = [{"prompt": f"p{i}", "custom_id": f"c{i}", **SLOW} for i in range(24)]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    one_rank = tmp_path / "one.jsonl"
    result = service.cli("run", path, "-o", one_rank)
    assert result.exit_code == 0, result.output

    env = ONE_PER_CALL | {"DINFER_BATCH_WORKER_TIMEOUT": "3", "DINFER_BATCH_HEARTBEAT": "1"}
    log = tmp_path / "node.log"
    service.start_node(log, "--replicas", "1", "--device", "cpu", "--tensor-parallel", "2",
                       **env)
    wait_for(lambda: "ready: " in log.read_text(), 120)
    job_id = submit(service, path, "--chunk-size", "24")
    service.wait_job(job_id, lambda j: j.completed_count >= 3, timeout=180)
    [worker] = workers(service)
    assert worker.device == "cpu,cpu"
    assert "cpu,cpu" in service.cli("workers").output
    [rank_1] = children(worker.pid)  # rank 0 is the worker process itself
    os.kill(rank_1, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{worker.pid}").exists(), 60)  # rank 0 went down
    before = finished(service, job_id)
    assert 3 <= len(before) < 24
    wait_for(lambda: len(workers(service)) == 2, 120)  # the replica, restarted

    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=300)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 24, 0), \
        log.read_text()[-3000:]
    after = finished(service, job_id)
    assert {line: after[line] for line in before} == before  # none rewritten
    with service.sessions()() as session:
        chunk = session.scalar(select(Chunk).where(Chunk.job_id == job_id))
    assert chunk.attempts == 2 and chunk.status == "done"
    assert "lost a rank" in log.read_text()
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    assert answers(out) == answers(one_rank)
