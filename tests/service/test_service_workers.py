"""Real `dinfer-batch worker` processes on the real Redis, with SQLite and PostgreSQL:
a job end to end, a worker killed mid-chunk, a line that kills every worker that runs it,
a job cancelled mid-way and retried."""

import os
import re
import signal

import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Chunk, Item
from tests.service_helpers import read_jsonl, wait_for, write_jsonl

pytestmark = pytest.mark.integration

# 32 forwards per request, one request per engine call: a job takes long enough, even on
# a fast machine, to be caught in the middle
SLOW = {"max_tokens": 32, "block_length": 32}
ONE_PER_CALL = {"DINFER_BATCH_ENGINE_BATCH": "1"}


def finished(service):
    with service.sessions()() as session:
        return dict(session.execute(select(Item.line, Item.finished_at)
                                    .where(Item.status != "pending")).all())


def submit(service, path, *args):
    result = service.cli("submit", path, *args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_job_end_to_end(service, tmp_path):
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"req-{i}"} for i in range(10)]
    lines[4] = {"prompt": "x", "decoder": "magic", "custom_id": "bad"}
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    service.start_worker(tmp_path / "worker.log")
    job_id = submit(service, path, "--max-tokens", "8", "--block-length", "8",
                    "--chunk-size", "4")
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 9, 1)
    assert job.completion_tokens > 0 and job.completed_at >= job.in_progress_at

    status = service.cli("status", job_id, "--watch")
    assert status.exit_code == 0 and "completed" in status.output
    listed = service.cli("list", "--status", "completed")
    assert listed.exit_code == 0 and job_id in listed.output
    assert job_id not in service.cli("list", "--status", "failed").output

    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    assert service.cli("results", job_id, "-o", out, "--errors", errors).exit_code == 0
    ok = read_jsonl(out)
    assert [line["custom_id"] for line in ok] == [f"req-{i}" for i in range(10) if i != 4]
    for line in ok:
        body = line["response"]["body"]
        assert body["usage"]["completion_tokens"] <= 8
        assert body["metrics"]["nfe"] > 0
    [error] = read_jsonl(errors)
    assert error["custom_id"] == "bad"
    assert error["error"]["message"].startswith("line 5: decoder must be one of")
    with service.sessions()() as session:
        chunks = session.scalars(select(Chunk).order_by(Chunk.chunk_id)).all()
    assert [c.size for c in chunks] == [4, 4, 1]
    assert all(c.status == "done" and c.worker and sum(c.batch_sizes) == c.size
               for c in chunks)


def test_killed_worker_mid_chunk_is_resumed_with_every_item_once(sqlite_service, tmp_path):
    service = sqlite_service
    lines = [{"prompt": f"p{i}", "custom_id": f"c{i}", **SLOW} for i in range(80)]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    # the reaper gives the chunk back once the dead worker's heartbeat is 3 s old
    env = ONE_PER_CALL | {"DINFER_BATCH_WORKER_TIMEOUT": "3", "DINFER_BATCH_HEARTBEAT": "1"}
    first = service.start_worker(tmp_path / "first.log", **env)
    job_id = submit(service, path, "--chunk-size", "80")
    service.wait_job(job_id, lambda j: j.completed_count >= 4)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = finished(service)
    assert 4 <= len(before) < 80

    service.start_worker(tmp_path / "second.log", **env)
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 80, 0)
    after = finished(service)
    assert {line: after[line] for line in before} == before  # none rewritten
    with service.sessions()() as session:
        chunk = session.scalar(select(Chunk))
    assert chunk.attempts == 2 and chunk.status == "done"
    out = tmp_path / "out.jsonl"
    service.cli("results", job_id, "-o", out)
    assert [line["custom_id"] for line in read_jsonl(out)] == [f"c{i}" for i in range(80)]


def test_a_line_that_kills_its_worker_twice_fails_alone(sqlite_service, tmp_path):
    service = sqlite_service
    lines = [{"prompt": f"p{i}", "custom_id": f"c{i}"} for i in range(8)]
    lines[3]["prompt"] = "KILL p3"  # as a request that runs its worker out of memory
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    env = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:KillingLineEngine",
           "DINFER_BATCH_ENGINE_BATCH": "2", "DINFER_BATCH_WORKER_TIMEOUT": "3",
           "DINFER_BATCH_HEARTBEAT": "1"}
    killed = []
    for name in ("first", "second"):  # SIGKILLed while they run the chunk
        worker = service.start_worker(tmp_path / f"{name}.log", **env)
        if not killed:
            job_id = submit(service, path, "--chunk-size", "8")
        wait_for(lambda worker=worker: worker.poll() is not None, 120)
        killed.append(worker.returncode)
    assert killed == [-signal.SIGKILL] * 2
    third = service.start_worker(tmp_path / "third.log", **env)
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 7, 1)
    assert third.poll() is None  # it never ran the line again
    with service.sessions()() as session:
        items = session.scalars(select(Item).order_by(Item.line)).all()
        chunk = session.scalar(select(Chunk))
    [failed] = [item for item in items if item.status == "failed"]
    assert (failed.line, failed.error_code) == (4, "worker_lost")
    assert failed.error_message.startswith("workers died 2 times while running this request")
    # the first pair finished before the first death; the second death held line 4 alone;
    # each attempt counted once (the third claim counts none: line 4 fails unrun, the
    # others are suspects, counted as each runs)
    assert [item.attempts for item in items] == [1, 1, 2, 2, 2, 2, 2, 2]
    assert chunk.attempts == 3 and chunk.status == "done"
    errors, out = tmp_path / "errors.jsonl", tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out, "--errors", errors).exit_code == 0
    assert [line["custom_id"] for line in read_jsonl(out)] == [
        f"c{i}" for i in range(8) if i != 3]
    assert [line["error"]["code"] for line in read_jsonl(errors)] == ["worker_lost"]


def test_cancel_mid_job_then_retry_finishes_the_rest(sqlite_service, tmp_path):
    service = sqlite_service
    lines = [{"prompt": f"p{i}", **SLOW} for i in range(48)]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    log = tmp_path / "worker.log"
    node = service.start_node(tmp_path / "terminal.log", "--replicas", "1", "--device", "cpu",
                              "--log-file", str(log), **ONE_PER_CALL)
    wait_for(lambda: log.exists() and "ready: " in log.read_text(), 120)
    assert node.poll() is None
    job_id = submit(service, path, "--chunk-size", "8")
    service.wait_job(job_id, lambda j: j.completed_count >= 2)
    assert service.cli("cancel", job_id).exit_code == 0
    job = service.wait_job(job_id, lambda j: j.status == "cancelled", timeout=60)
    assert 2 <= job.completed_count < 48 and job.failed_count == 0
    assert service.cli("status", job_id).exit_code == 1

    out = tmp_path / "out.jsonl"
    service.cli("results", job_id, "-o", out)
    codes = [line["error"]["code"] if line["error"] else "ok" for line in read_jsonl(out)]
    assert codes.count("ok") == job.completed_count
    assert codes.count("batch_cancelled") == 48 - job.completed_count

    assert service.cli("retry", job_id).exit_code == 0
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 48, 0)

    # the log, as a service's: one line per chunk, no Celery chatter, nothing that reads
    # as a failure after the cancel, the root warning once (in our words) when root
    service.stop_workers()
    text = log.read_text()
    assert (tmp_path / "terminal.log").read_text() == ""  # all of it went to --log-file
    chunk_lines = [line for line in text.splitlines() if f"job {job_id} chunk " in line]
    assert len(chunk_lines) >= 6
    assert all(re.search(r"chunk \d+ (done|cancelled): \d+ items, \d+ tokens in "
                         r"[\d.]+ s, [\d.]+ tokens/s$", line) for line in chunk_lines)
    for chatter in ("revoked in backend", "SecurityWarning", "Task dinfer_batch.run_chunk",
                    "celery@", "-------------- "):
        assert chatter not in text
    assert text.count("running as root") == (1 if os.geteuid() == 0 else 0)
