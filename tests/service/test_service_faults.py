"""Faults a long-running service meets, with real workers on the real Redis: a request
that makes the engine raise, an engine call that hangs, an output file that cannot be
written. Each ends with every item accounted for exactly once."""

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Chunk, Item
from tests.service_helpers import env_settings, read_jsonl, wait_for, write_jsonl

pytestmark = pytest.mark.integration

ENGINES = "tests.stand_in_engines:"


def submit(service, path, *args):
    result = service.cli("submit", path, *args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def items_and_chunks(service):
    with service.sessions()() as session:
        items = session.scalars(select(Item).order_by(Item.line)).all()
        chunks = session.scalars(select(Chunk).order_by(Chunk.chunk_id)).all()
    return items, chunks


def test_a_poison_request_fails_alone_and_the_rest_of_its_batch_runs(sqlite_service, tmp_path):
    service = sqlite_service
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(20)]
    lines[13]["prompt"] = "POISON add 1 1="
    worker = service.start_worker(tmp_path / "worker.log",
                                  DINFER_BATCH_ENGINE=ENGINES + "PoisonEngine")
    job_id = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "10")
    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=60)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 19, 1)
    items, chunks = items_and_chunks(service)
    assert [i.line for i in items if i.status == "failed"] == [14]
    assert items[13].error_code == "engine_error"
    assert "RuntimeError: the engine cannot digest this prompt" in items[13].error_message
    assert all(i.output_text == "42" for i in items if i.line != 14)
    # both chunks ran once, on the same worker, which is still up
    assert [(c.status, c.attempts) for c in chunks] == [("done", 1), ("done", 1)]
    assert worker.poll() is None and len({c.worker for c in chunks}) == 1
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    codes = [line["error"]["code"] if line["error"] else "ok" for line in read_jsonl(out)]
    assert codes == ["ok"] * 13 + ["engine_error"] + ["ok"] * 6


def test_a_hung_engine_call_recycles_the_worker_and_requeues_its_chunk(sqlite_service,
                                                                       tmp_path):
    service = sqlite_service
    marker, log = tmp_path / "hung", tmp_path / "worker.log"
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(12)]
    worker = service.start_worker(log, DINFER_BATCH_ENGINE=ENGINES + "HangOnceEngine",
                                  STAND_IN_HANG_MARKER=str(marker),
                                  DINFER_BATCH_CHUNK_TIMEOUT="3")
    job_id = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "4")
    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=60)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 12, 0)
    assert marker.read_text() == str(worker.pid)  # the first engine call hung, in this worker
    text = log.read_text()
    assert "ran past DINFER_BATCH_CHUNK_TIMEOUT=3s" in text and "recycling the worker" in text
    assert worker.poll() is None  # the same process, running a fresh worker
    items, chunks = items_and_chunks(service)
    assert all(i.status == "completed" and i.output_text == "42" for i in items)
    assert [c.attempts for c in chunks] == [2, 1, 1]


def limit_file_size(size: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.fixture
def finished_job(sqlite_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", ["{bad"] * 500)  # ~100 kB of results, no model
    result = sqlite_service.cli("run", path)
    assert result.exit_code == 1  # every line failed: the job failed, and has results
    return sqlite_service, sqlite_service.cli("list", "--json").output


def results_process(service, job_id, out: Path, **kwargs):
    return subprocess.run([sys.executable, "-m", "dinfer_batch", "results", job_id, "-o",
                           str(out)], env=os.environ | service.env, capture_output=True,
                          text=True, timeout=60, **kwargs)


def test_results_into_a_full_disk_fail_in_one_line_and_leave_no_file(finished_job, tmp_path):
    service, listed = finished_job
    job_id = json.loads(listed)["id"]
    out = tmp_path / "out" / "results.jsonl"
    out.parent.mkdir()
    # the result pages' sizes are recorded by a first read (ADR 022), so that the
    # database need not grow while the disk is full
    assert results_process(service, job_id, tmp_path / "first.jsonl").returncode == 0
    # a file size limit makes writes fail with EFBIG after 20 kB, as a full disk would
    done = results_process(service, job_id, out, preexec_fn=limit_file_size(20_000))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: cannot write {out}: File too large; run the same command again to resume"]
    [partial] = out.parent.iterdir()  # the hidden partial file, for the next run: no FILE
    assert partial.name.startswith(".results.jsonl.") and partial.name.endswith(".partial")

    done = results_process(service, job_id, out)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    assert out.read_bytes() == (tmp_path / "first.jsonl").read_bytes()
    assert len(read_jsonl(out)) == 500 and list(out.parent.iterdir()) == [out]


def test_results_into_a_read_only_directory_fail_in_one_line(finished_job, tmp_path):
    service, listed = finished_job
    job_id = json.loads(listed)["id"]
    out = tmp_path / "read-only" / "results.jsonl"
    out.parent.mkdir()
    out.write_text("the previous results\n")
    out.parent.chmod(0o555)
    try:
        if os.geteuid() == 0:  # root writes anywhere: read-only bind mount, own namespace
            command = (f"mount --bind -o ro {out.parent} {out.parent} && exec "
                       f"{sys.executable} -m dinfer_batch results {job_id} -o {out}")
            done = subprocess.run(["unshare", "-m", "sh", "-c", command],
                                  env=os.environ | service.env, capture_output=True,
                                  text=True, timeout=60)
        else:
            done = results_process(service, job_id, out)
    finally:
        out.parent.chmod(0o755)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write {out}: ")
    assert "Read-only file system" in line or "Permission denied" in line
    assert out.read_text() == "the previous results\n"  # untouched
    assert list(out.parent.iterdir()) == [out]


def test_a_database_outage_mid_job_loses_and_doubles_nothing(private_postgres, routed_service,
                                                             tmp_path):
    """PostgreSQL restarted mid-job, reached directly and through PgBouncer."""
    service, log = routed_service, tmp_path / "worker.log"
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(600)]
    service.start_worker(log, DINFER_BATCH_ENGINE=ENGINES + "InstantEngine",
                         STAND_IN_SECONDS_PER_CALL="0.05", DINFER_BATCH_ENGINE_BATCH="4")
    job_id = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "40")
    service.wait_job(job_id, lambda j: j.completed_count >= 60, timeout=60)
    broker = redis.Redis.from_url(service.env["DINFER_BATCH_BROKER_URL"])

    private_postgres.stop()
    queued = broker.llen(service.queue)  # permits: one per live worker, taken or waiting
    down = service.cli("status", job_id)
    assert down.exit_code == 2
    assert down.output.strip().splitlines() == [down.output.strip()]
    url = service.env["DINFER_BATCH_DATABASE_URL"]
    assert down.output.startswith(f"error: cannot connect to the database {url}")
    time.sleep(10)
    # no permit was consumed meanwhile: the worker holds at most the one it took
    # (unacknowledged) while it waits for the database
    assert broker.llen(service.queue) >= queued - 1
    private_postgres.start()
    # PgBouncer answers "server login has been failing" until its next login try
    # (server_login_retry), then serves as before
    wait_for(lambda: service.cli("status", job_id).exit_code == 0, 30)

    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=120)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 600, 0)
    items, chunks = items_and_chunks(service)
    assert [i.status for i in items] == ["completed"] * 600  # the counters were not doubled
    assert all(c.status == "done" for c in chunks)
    # directly, the chunk's writes wait the outage out; through PgBouncer they may instead
    # wait in its queue, while the heartbeat's writes fail and are retried
    noticed = log.read_text()
    assert "database unreachable, retrying" in noticed or (
        url != private_postgres.url and "heartbeat failed" in noticed)
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    assert [line["custom_id"] for line in read_jsonl(out)] == [f"c{i}" for i in range(600)]


def test_database_calls_wait_out_an_outage_then_give_up(monkeypatch):
    """The retry under every worker write: it outlasts a short outage, and hands the chunk
    back (DatabaseDown, then a requeued message) once DINFER_BATCH_DB_RETRY_SECONDS pass."""
    from sqlalchemy.exc import OperationalError

    from dinfer_batch.storage.retry import DatabaseDown, patiently

    calls = []

    def flaky(outage_calls: int) -> str:
        calls.append(time.monotonic())
        if len(calls) <= outage_calls:
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
        return "written"

    monkeypatch.setenv("DINFER_BATCH_DB_RETRY_SECONDS", "5")
    assert patiently(env_settings().db_retry_seconds, flaky, 3) == "written"
    gaps = [later - earlier for earlier, later in zip(calls, calls[1:], strict=False)]
    assert len(calls) == 4 and gaps[0] < gaps[1] < gaps[2]  # backing off
    calls.clear()
    monkeypatch.setenv("DINFER_BATCH_DB_RETRY_SECONDS", "0.5")
    with pytest.raises(DatabaseDown, match="the database is unreachable: refused"):
        patiently(env_settings().db_retry_seconds, flaky, 100)
    assert 1 < len(calls) < 5


def test_a_reply_out_of_step_is_retried_and_a_server_error_is_not():
    """psycopg's own InternalError (seen through PgBouncer after PostgreSQL restarted:
    "received 2 results from command 'COMMIT'") is a connection gone wrong: retried, as
    an outage is. A server's internal error (SQLSTATE XX000) is not an outage."""
    import psycopg
    from sqlalchemy.exc import InternalError

    from dinfer_batch.storage.retry import patiently

    calls = []

    def out_of_step_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise InternalError("COMMIT", {}, psycopg.InternalError(
                "received 2 results from command 'COMMIT'"))
        return "written"

    assert patiently(5, out_of_step_once) == "written" and len(calls) == 2

    def server_error() -> str:
        calls.append(1)
        raise InternalError("SELECT", {}, psycopg.errors.InternalError_("XX000"))

    calls.clear()
    with pytest.raises(InternalError):
        patiently(5, server_error)
    assert len(calls) == 1

