"""An items table of a fleet's size: what a worker's claims and result writes, `status`
and `results` cost as the table grows, and what retention's purge holds.

A private PostgreSQL (initdb, as scale_sim.py) is filled, step by step, with ended jobs
of finished items (`--history-job` lines each), written in bulk by INSERT ... SELECT
over generate_series (not through the service), then VACUUM ANALYZE and a CHECKPOINT. At each size
(`--sizes`, e.g. 0,1000000,10000000) a fresh job of `--job-items` lines is made by the
service's ingest and run as a worker would, without an engine: each chunk claimed
(jobs/running/dispatch.py), its results written FLUSH_ITEMS at a time
(jobs/running/chunk_state.py: `record`), closed; then `status`'s reads and the job's
`results` (every line, formatted), and the last page of the largest ended job; then a
job of `--history-job` pending lines is added in bulk and a few of its chunks run the
same way (`big_job_*`: what a worker's writes cost inside a big job). At the end,
retention purges one ended job (jobs/retention.py: `purge`), timing each batch's
transaction (how long it holds its row locks). Every step is measured again right after
on a second database of the same server that stays empty (`control`): on a shared
machine, the difference between the two is the table's size, not the machine's load.
Prints JSON; times in ms (medians).

    python benchmarks/items_table.py                              # 0, 1M and 10M rows
    python benchmarks/items_table.py --sizes 0,200000 --history-job 100000   # quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* (the private server)

from sqlalchemy import Text, cast, delete, event, select, text  # noqa: E402
from sqlalchemy.orm import Session, sessionmaker  # noqa: E402

from dinfer_batch.config import Settings  # noqa: E402
from dinfer_batch.formats.results.output import Outcome  # noqa: E402
from dinfer_batch.jobs import retention  # noqa: E402
from dinfer_batch.jobs.expiry import get_job  # noqa: E402
from dinfer_batch.jobs.intake.ingest import ingest  # noqa: E402
from dinfer_batch.jobs.reading.place import place  # noqa: E402
from dinfer_batch.jobs.reading.results import output_texts, page_bounds, page_rows  # noqa: E402
from dinfer_batch.jobs.reading.view import job_object  # noqa: E402
from dinfer_batch.jobs.running import chunk_state, dispatch  # noqa: E402
from dinfer_batch.jobs.running.chunk_state import ChunkMetrics  # noqa: E402
from dinfer_batch.jobs.running.result_writer import FLUSH_ITEMS  # noqa: E402
from dinfer_batch.jobs.spec import JobSpec  # noqa: E402
from dinfer_batch.model_info import load_model_info  # noqa: E402
from dinfer_batch.statuses import ChunkStatus  # noqa: E402
from dinfer_batch.storage import db  # noqa: E402
from dinfer_batch.storage.registry import live_on_job  # noqa: E402
from dinfer_batch.storage.tables import Item, Job  # noqa: E402
from dinfer_models import MODELS_DIR  # noqa: E402
from tests.private_postgres import PrivatePostgres  # noqa: E402

CHUNK = 64
ITEMS_SQL = """
INSERT INTO items (job_id, line, chunk_id, request, status, output_text, finish_reason,
                   prompt_tokens, completion_tokens, nfe, latency_s, attempts, finished_at,
                   cost)
SELECT :job, g, (g - 1) / :chunk, :request, :status,
       CASE WHEN :ended THEN to_json('the answer is ' || g) END,
       CASE WHEN :ended THEN 'stop' END, 12, 7, 3, 0.05, 1,
       CASE WHEN :ended THEN :now END, 1
FROM generate_series(1, :n) AS g"""
CHUNKS_SQL = """
INSERT INTO chunks (job_id, chunk_id, status, size, attempts, prompt_tokens,
                    completion_tokens, forwards, seconds, started_at, finished_at, cost)
SELECT :job, g, :chunk_status, :chunk, 1, 768, 448, 192, 1.0, :now, :now, :chunk
FROM generate_series(0, (:n - 1) / :chunk) AS g"""
ENDED_JOB_SQL = """
UPDATE jobs SET status = 'completed', completed_at = :now, total_count = :n,
       completed_count = :n, chunk_count = (:n + :chunk - 1) / :chunk WHERE id = :job"""
RUNNING_JOB_SQL = """
UPDATE jobs SET total_count = :n, chunk_count = (:n + :chunk - 1) / :chunk WHERE id = :job"""


def ms(seconds: float) -> float:
    return round(1000 * seconds, 2)


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


class Table:
    """One database of the private server, its sessions, its ended jobs."""

    def __init__(self, tmp: Path, server: PrivatePostgres, database: str) -> None:
        self.tmp, self.server = tmp, server
        self.url = server.url.rsplit("/", 1)[0] + "/" + database
        if database != "postgres":
            with db.db_engine(server.url).connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT").execute(
                    text(f'CREATE DATABASE "{database}"'))
        db.upgrade(self.url)
        self.sessions: sessionmaker[Session] = db.ready(self.url)
        self.config = Settings.from_env({"DINFER_BATCH_DATABASE_URL": self.url})
        self.model = load_model_info(str(MODELS_DIR / "demo"), MODELS_DIR)
        self.rows = 0
        self.history: list[str] = []
        self.control = database != "postgres"  # stays small: the machine's load, measured

    def new_job(self, lines: int, queue: str) -> Job:
        path = self.tmp / f"{uuid.uuid4().hex}.jsonl"
        path.write_text("".join(json.dumps({"prompt": f"add {i} {i}="}) + "\n"
                                for i in range(lines)))
        return ingest(self.sessions, path, JobSpec(model=self.model, queue=queue,
                                                   chunk_size=CHUNK), self.config)

    def grow_to(self, rows: int, per_job: int) -> float:
        """Add ended jobs of finished items until the table holds `rows`; seconds taken."""
        started = time.perf_counter()
        while self.rows < rows:
            self.history.append(self.bulk_job(min(per_job, rows - self.rows), "history"))
        with db.db_engine(self.url).connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            for statement in ("VACUUM ANALYZE", "CHECKPOINT"):  # the fill's writes done
                autocommit.execute(text(statement))
        return time.perf_counter() - started

    def bulk_job(self, n: int, queue: str, ended: bool = True) -> str:
        """A job of `n` lines written in bulk: ended with every item finished, or in
        progress with every item pending and every chunk queued."""
        template = self.new_job(1, queue)
        with self.sessions() as session:
            request = session.scalar(select(cast(Item.request, Text))
                                     .where(Item.job_id == template.id))
        values = {"job": template.id, "n": n, "chunk": CHUNK, "now": time.time()}
        with self.sessions.begin() as session:
            session.execute(delete(Item).where(Item.job_id == template.id))
            session.execute(text("DELETE FROM chunks WHERE job_id = :job"), values)
            session.execute(text(ITEMS_SQL), values | {
                "request": request, "ended": ended,
                "status": "completed" if ended else "pending"})
            session.execute(text(CHUNKS_SQL), values | {
                "chunk_status": "done" if ended else "queued"})
            session.execute(text(ENDED_JOB_SQL if ended else RUNNING_JOB_SQL), values)
        self.rows += n
        return template.id


def run_chunks(table: Table, queue: str, chunks: int | None = None) -> dict[str, float]:
    """Claim, write and close the queue's chunks (up to `chunks`) as a worker does, with
    no engine: the median ms of a claim, a result write and a close."""
    claims, writes, closes = [], [], []
    while chunks is None or len(claims) < chunks:
        took, claimed = timed(lambda: dispatch.claim_next_chunk(
            table.sessions, queue, "bench/1", "cpu", 60))
        if claimed is None:
            break
        claims.append(took)
        job_id, chunk_id, items = claimed
        for start in range(0, len(items), FLUSH_ITEMS):
            outcomes = [Outcome(line=item.line, text="42", finish_reason="stop",
                                prompt_tokens=5, completion_tokens=2, nfe=1)
                        for item in items[start:start + FLUSH_ITEMS]]
            writes.append(timed(lambda j=job_id, o=outcomes: chunk_state.record(
                table.sessions, j, o))[0])
        closes.append(timed(lambda j=job_id, c=chunk_id: chunk_state.finish(
            table.sessions, j, c, ChunkStatus.DONE, ChunkMetrics()))[0])
    return {"claim_ms": ms(statistics.median(claims)),
            "record_ms": ms(statistics.median(writes)),
            "finish_ms": ms(statistics.median(closes))}


def measure_step(table: Table, job_items: int, big_job: int) -> dict[str, Any]:
    """A fresh job run whole and read; a few chunks of a job of `big_job` pending lines
    (left in the table, but for the control's, deleted)."""
    queue = f"q_{uuid.uuid4().hex[:8]}"
    job = table.new_job(job_items, queue)
    step = run_chunks(table, queue) | reads(table, job.id)
    big = f"big_{uuid.uuid4().hex[:8]}"
    big_id = table.bulk_job(big_job, big, ended=False)
    with db.db_engine(table.url).connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("ANALYZE items"))
    step |= {f"big_job_{name}": value
             for name, value in run_chunks(table, big, chunks=8).items()}
    if table.control:
        with table.sessions.begin() as session:
            session.execute(delete(Item).where(Item.job_id == big_id))
        table.rows -= big_job
    return step


def read_status(table: Table, job_id: str) -> int:
    """What `dinfer-batch status JOB --json` reads (cli/jobs.py); the text's length."""
    job = get_job(table.sessions, job_id)
    live_on_job(table.sessions, job_id, 60)
    return len(json.dumps(job_object(job, place(table.sessions, job))))


def reads(table: Table, job_id: str) -> dict[str, Any]:
    status = statistics.median(timed(lambda: read_status(table, job_id))[0] for _ in range(20))
    job = get_job(table.sessions, job_id)
    took, lines = timed(lambda: sum(text.count("\n") for text, _ in output_texts(
        table.url, job)))
    figures = {"status_ms": ms(status), "results_ms_per_1000_lines": ms(1000 * took / lines)}
    if table.history:
        largest = table.history[0]
        bounds = list(page_bounds(table.sessions, largest))
        last = statistics.median(timed(lambda: page_rows(table.sessions, largest,
                                                         bounds[-1]))[0] for _ in range(5))
        figures["ended_job_last_page_ms"] = ms(last)
    return figures


def measure_purge(table: Table) -> dict[str, Any]:
    """Purge one ended job, timing each batch's transaction."""
    job_id = table.history[-1]
    batches: list[float] = []
    engine = db.db_engine(table.url)

    def started(*_: Any) -> None:
        batches.append(time.perf_counter())

    def ended(*_: Any) -> None:
        batches[-1] = time.perf_counter() - batches[-1]

    event.listen(engine, "begin", started)
    event.listen(engine, "commit", ended)
    try:
        took, deleted = timed(lambda: retention.purge(table.sessions, job_id))
    finally:
        event.remove(engine, "begin", started)
        event.remove(engine, "commit", ended)
    return {"purged_items": deleted, "purge_s": round(took, 2),
            "transactions": len(batches), "longest_transaction_ms": ms(max(batches)),
            "median_transaction_ms": ms(statistics.median(batches))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,1000000,10000000",
                        help="finished item rows before each measure, comma-separated")
    parser.add_argument("--history-job", type=int, default=250_000,
                        help="lines of each ended job the fill writes")
    parser.add_argument("--job-items", type=int, default=2048,
                        help="lines of the job run and read at each size")
    args = parser.parse_args()
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        server = PrivatePostgres.create()
        server.start()
        try:
            table, control = Table(Path(tmp), server, "postgres"), Table(Path(tmp), server,
                                                                          "control")
            for size in (int(n) for n in args.sizes.split(",")):
                fill = table.grow_to(size, args.history_job)
                step = {"item_rows": table.rows, "fill_s": round(fill, 1)}
                step |= measure_step(table, args.job_items, args.history_job)
                step["control"] = measure_step(control, args.job_items, args.history_job)
                print(json.dumps(step), file=sys.stderr)
                steps.append(step)
            purge = measure_purge(table) if table.history else None
        finally:
            server.remove()
    print(json.dumps({"job_items": args.job_items, "chunk_size": CHUNK,
                      "history_job_lines": args.history_job, "steps": steps,
                      "purge": purge}, indent=2))


if __name__ == "__main__":
    main()
