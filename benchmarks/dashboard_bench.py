"""Dashboard page render time, server-side, printed as one JSON object: 10,000 jobs (half
of them one owner's) and one job of 1,000,000 requests (3,907 chunks of 256, its 20 failed
requests at the very end: the worst case for finding the first failures). Each page is
requested in-process through the app (routing, SQL, templates; no network), warm, and
the median of `--repeat` requests is reported in milliseconds. Goal: the jobs list and
the job page under 200 ms. The pages are measured a second time without migration 0011's
indexes (newest-first jobs, failed items), to show what they are for, and the partial
index's cost on the item writes of a running job is measured beside.

    python benchmarks/dashboard_bench.py                          # SQLite in a temp dir
    python benchmarks/dashboard_bench.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
      (a PostgreSQL URL names a database the script creates, fills and drops)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from sqlalchemy import insert, text, update  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from dinfer_batch.storage import db  # noqa: E402
from dinfer_batch.storage.tables import Chunk, Item, Job, Worker  # noqa: E402

JOBS, BIG, CHUNK, FAILED_AT_END = 10_000, 1_000_000, 256, 20
BIG_ID = "batch_" + "b" * 32
STATUSES = ("completed", "completed", "completed", "failed", "cancelled", "in_progress")


def job_row(index: int, now: float) -> dict[str, Any]:
    status = STATUSES[index % len(STATUSES)]
    ended = status != "in_progress"
    created = now - (JOBS - index) * 30.0
    return {"id": f"batch_{index:032x}", "status": status, "model": "/models/LLaDA-8B",
            "queue": "dinfer_batch", "input_file": "/srv/files/x", "params": {"max_tokens": 64},
            "meta": {"name": f"nightly-{index}"}, "chunk_size": CHUNK, "chunk_count": 1,
            "retries": 0, "seed_base": 0, "deduplicated_count": 0, "total_count": 100,
            "completed_count": 100 if ended else 40, "failed_count": 0, "prompt_tokens": 900,
            "completion_tokens": 6400, "error": None, "created_at": created,
            "in_progress_at": created + 1, "completed_at": created + 20 if ended else None,
            "owner": "alice" if index % 2 else "bob", "expires_at": created + 86400}


def fill(url: str) -> None:
    """Rows written in SQL (a recursive CTE makes the million items), not through ingest:
    this measures reading, not writing."""
    now = time.time()
    sessions = db.sessions(url)
    with sessions.begin() as session:
        session.execute(insert(Job), [job_row(i, now) for i in range(JOBS)])
        session.execute(insert(Chunk), [
            {"job_id": f"batch_{i:032x}", "chunk_id": 0, "size": 100,
             "status": "queued" if STATUSES[i % len(STATUSES)] == "in_progress" else "done",
             "attempts": 1, "completion_tokens": 6400, "prompt_tokens": 900, "forwards": 10,
             "seconds": 19.0, "started_at": now - 100, "finished_at": now - 50}
            for i in range(JOBS)])
        chunks = -(-BIG // CHUNK)
        started = now - 3600
        session.execute(insert(Job), [job_row(0, now) | {
            "id": BIG_ID, "status": "in_progress", "total_count": BIG, "chunk_count": chunks,
            "completed_count": BIG - FAILED_AT_END - CHUNK * 50, "failed_count": FAILED_AT_END,
            "created_at": started, "in_progress_at": started, "completed_at": None,
            "completion_tokens": 64 * BIG, "owner": "alice", "expires_at": now + 86400}])
        series = ("WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s "
                  "WHERE g < {last}) ")
        session.execute(text(
            series.format(last=chunks - 1)
            + "INSERT INTO chunks (job_id, chunk_id, status, size, attempts, prompt_tokens, "
              "completion_tokens, forwards, seconds, started_at, finished_at) "
              f"SELECT '{BIG_ID}', g, CASE WHEN g < {chunks - 50} THEN 'done' ELSE 'queued' END,"
              f" {CHUNK}, 1, 2300, {64 * CHUNK}, 40, 0.9, {started} + g * 0.9, "
              f"CASE WHEN g < {chunks - 50} THEN {started} + g * 0.9 + 0.9 END FROM s"))
        session.execute(text(
            series.format(last=BIG - 1)
            + "INSERT INTO items (job_id, line, custom_id, chunk_id, status, attempts, "
              "prompt_tokens, completion_tokens, finished_at, error_code, error_message) "
              f"SELECT '{BIG_ID}', g, 'r' || g, g / {CHUNK}, "
              f"CASE WHEN g >= {BIG - FAILED_AT_END} THEN 'failed' ELSE 'completed' END, 1, 9, "
              f"64, {started} + g * 0.0035, CASE WHEN g >= {BIG - FAILED_AT_END} THEN "
              "'engine_error' END, CASE WHEN g >= "
              f"{BIG - FAILED_AT_END} THEN 'the engine failed' END FROM s"))
        session.add_all(Worker(id=f"w{i}", name=f"gpu{i}", host="node1", pid=100 + i,
                               model="/models/LLaDA-8B", device=f"cuda:{i}",
                               queues="dinfer_batch", job_id=BIG_ID, chunk_id=i,
                               items_done=1000, tokens_per_s=900.0, started_at=now - 600,
                               heartbeat_at=now) for i in range(8))
    if url.startswith("postgresql"):
        with db.db_engine(url).connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM ANALYZE"))


def write_cost(url: str, count: int = 50_000) -> dict[str, float]:
    """What the partial index costs the hot write path: items of a job go from pending
    to completed (1 % failed) in executemany batches of 256 by primary key, as
    chunk_state.record writes them; timed with the index, without it, and with it again
    (requests/s; the items are put back to pending between runs)."""
    job_id = "batch_" + "w" * 32
    sessions = db.sessions(url)
    with sessions.begin() as session:
        session.execute(text(
            f"WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < "
            f"{count - 1}) INSERT INTO items (job_id, line, custom_id, chunk_id, status, "
            f"attempts) SELECT '{job_id}', g, 'r' || g, g / {CHUNK}, 'pending', 1 FROM s"))

    def run() -> float:
        started = time.perf_counter()
        for start in range(0, count, CHUNK):
            with sessions.begin() as session:
                session.execute(update(Item), [
                    {"job_id": job_id, "line": line,
                     "status": "failed" if line % 100 == 7 else "completed",
                     "output_text": "x" * 200, "completion_tokens": 64,
                     "finished_at": time.time(),
                     "error_code": "engine_error" if line % 100 == 7 else None}
                    for line in range(start, min(start + CHUNK, count))])
        elapsed = time.perf_counter() - started
        with sessions.begin() as session:
            session.execute(text(f"UPDATE items SET status = 'pending', output_text = NULL, "
                                 f"error_code = NULL WHERE job_id = '{job_id}'"))
        return round(count / elapsed)

    with_index = run()
    with sessions.begin() as session:
        session.execute(text("DROP INDEX ix_items_failed"))
    without = run()
    with sessions.begin() as session:
        session.execute(text("CREATE INDEX ix_items_failed ON items (job_id, line) "
                             "WHERE status = 'failed'"))
    return {"with_index": with_index, "without_index": without, "with_index_again": run()}


def timed(client: Any, path: str, repeat: int) -> float:
    client.get(path)  # warm
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return round(statistics.median(times), 1)


def measure(url: str, repeat: int) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from dinfer_batch.api.keys import create_key
    from dinfer_batch.dashboard.access import COOKIE
    from dinfer_batch.server import create_app

    os.environ["DINFER_BATCH_DATABASE_URL"] = url
    sessions = db.ready(url)
    admin = create_key(sessions, "bench-admin", admin=True)
    alice = create_key(sessions, "bench-alice", owner="alice")
    middle = f"batch_{JOBS // 2:032x}"
    figures: dict[str, Any] = {}
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        client.cookies.set(COOKIE, admin)
        page = client.get(f"/jobs/{BIG_ID}").text
        assert "engine_error" in page and "<polyline" in page
        figures["jobs_list_all_ms"] = timed(client, "/", repeat)
        figures["jobs_list_in_progress_ms"] = timed(client, "/?status=in_progress", repeat)
        figures["jobs_list_page_101_ms"] = timed(client, f"/?after={middle}", repeat)
        figures["job_page_1m_requests_ms"] = timed(client, f"/jobs/{BIG_ID}", repeat)
        figures["fleet_page_ms"] = timed(client, "/fleet", repeat)
        client.cookies.set(COOKIE, alice)
        figures["jobs_list_one_owner_ms"] = timed(client, "/", repeat)
        client.cookies.set(COOKIE, admin)
        with sessions.begin() as session:  # without migration 0011's indexes
            for index in ("ix_items_failed", "ix_jobs_created", "ix_jobs_owner_created"):
                session.execute(text(f"DROP INDEX {index}"))
        few = max(repeat // 4, 3)
        figures["without_0011_indexes"] = {
            "job_page_1m_requests_ms": timed(client, f"/jobs/{BIG_ID}", few),
            "jobs_list_all_ms": timed(client, "/", few),
            "jobs_list_page_101_ms": timed(client, f"/?after={middle}", few)}
        client.cookies.set(COOKIE, alice)
        figures["without_0011_indexes"]["jobs_list_one_owner_ms"] = timed(client, "/", few)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{scratch}/dashboard.db"
        parsed = make_url(url)
        postgres = parsed.get_backend_name() == "postgresql"
        if postgres:
            admin_url = parsed.set(drivername="postgresql", database="postgres")
            conninfo = admin_url.render_as_string(hide_password=False)
            with psycopg.connect(conninfo, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{parsed.database}"')
                admin.execute(f'CREATE DATABASE "{parsed.database}"')
        try:
            db.upgrade(url)
            started = time.perf_counter()
            fill(url)
            filled_s = round(time.perf_counter() - started, 1)
            writes = write_cost(url)
            figures = measure(url, args.repeat)
        finally:
            db.db_engine(url).dispose()
            if postgres:
                with psycopg.connect(conninfo, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    print(json.dumps({"database": parsed.get_backend_name(), "jobs": JOBS + 1,
                      "big_job_requests": BIG, "fill_s": filled_s, "repeat": args.repeat,
                      **figures, "item_writes_per_s": writes}))


if __name__ == "__main__":
    main()
