"""Dispatch figures, on a baseline commit and on this tree in one run, printed as JSON:

- small_behind_big: one worker, a 40-chunk job, then (two chunks into it) a 2-chunk job:
  the small job's seconds from submission to completion, in chunk run times too, when its
  first chunk started, and how many of the big job's chunks ran meanwhile;
- owners: alice submits 40 chunks, bob (three chunks later) 20: bob's share of the chunks
  started in each 2-second window after he submitted, and over the whole time both waited.

Chunks: two requests, one engine call of the stand-in engine that sleeps 0.3 s. Each tree
runs with its own code (PYTHONPATH), SQLite database and queue; results are read with
plain SQL, so the baseline needs only a `chunks` and a `jobs` table.

    python benchmarks/fairness_bench.py                  # baseline: main
    python benchmarks/fairness_bench.py --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* and benchmarks.*

import redis  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from benchmarks.baseline import unpack  # noqa: E402
from benchmarks.service_bench import bench_service, cli, default_model  # noqa: E402
from tests.service_helpers import Service, wait_for, write_jsonl  # noqa: E402

PACED = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
         "STAND_IN_SECONDS_PER_CALL": "0.3"}
CHUNK = 2
WINDOW_S = 2.0
# make a job of an owner through jobs.create, as the HTTP API does for a key's owner; a
# baseline from before #49 takes no broker (its Celery app was made at import), one from
# before #55 its job options as make_spec's keywords
OWNER_JOB = """
import inspect
import sys
from pathlib import Path
import os
from dinfer_batch.config import Settings
from dinfer_batch.jobs.create import create_job, make_spec
from dinfer_batch.storage import db
config = Settings.from_env(os.environ)
options = dict(queue=config.default_queue, chunk_size=int(sys.argv[3]), metadata={},
               owner=sys.argv[2])
try:
    from dinfer_batch.jobs.spec import JobOptions
except ImportError:
    spec = make_spec(config.default_model, {}, model_dir=config.model_dir, **options)
else:
    spec = make_spec(config.default_model, {}, JobOptions(**options), config.model_dir)
sessions = db.ready(config.database_url)
if "broker" in inspect.signature(create_job).parameters:
    from dinfer_workers.broker import Broker
    with Broker(config.broker_url, config.visibility_timeout) as broker:
        print(create_job(sessions, broker, Path(sys.argv[1]), spec, config).id)
else:
    print(create_job(sessions, Path(sys.argv[1]), spec, config).id)
"""


class Tree:
    """One tree's service: its code on PYTHONPATH, its SQLite database and queue."""

    def __init__(self, code: Path, tmp: Path, broker: str) -> None:
        tmp.mkdir()
        self.tmp = tmp
        self.service: Service = bench_service(tmp, default_model(tmp), None, broker,
                                              PYTHONPATH=str(code), **PACED)
        self.sql = create_engine(self.service.env["DINFER_BATCH_DATABASE_URL"])

    def lines(self, name: str, chunks: int) -> Path:
        return write_jsonl(self.tmp / f"{name}.jsonl",
                           [{"prompt": f"{name} {i}"} for i in range(CHUNK * chunks)])

    def submit(self, name: str, chunks: int) -> str:
        return cli(self.service.env, "submit", str(self.lines(name, chunks)), "--chunk-size",
                   str(CHUNK))[0]

    def owners_job(self, owner: str, chunks: int) -> str:
        return subprocess.run([sys.executable, "-c", OWNER_JOB, str(self.lines(owner, chunks)),
                               owner, str(CHUNK)], env=self.service.env, check=True,
                              capture_output=True, text=True).stdout.strip()

    def job(self, job_id: str) -> Any:
        with self.sql.connect() as connection:
            return connection.execute(text(
                "SELECT status, completed_count, created_at, completed_at FROM jobs "
                "WHERE id = :id"), {"id": job_id}).one()

    def wait(self, job_id: str, done: int | None = None) -> Any:
        def reached() -> bool:
            job = self.job(job_id)
            return job.status == "completed" if done is None else job.completed_count >= done
        wait_for(reached, 600, poll=0.05)
        return self.job(job_id)

    def runs(self) -> list[Any]:
        with self.sql.connect() as connection:
            return connection.execute(text(
                "SELECT job_id, started_at, finished_at FROM chunks WHERE started_at IS NOT "
                "NULL ORDER BY started_at")).all()


def small_behind_big(tree: Tree) -> dict[str, Any]:
    big = tree.submit("big", 40)
    tree.wait(big, done=2 * CHUNK)
    small_id = tree.submit("small", 2)
    small = tree.wait(small_id)
    tree.wait(big)
    runs = tree.runs()
    chunk_s = statistics.median(r.finished_at - r.started_at for r in runs)
    during = sum(1 for r in runs if r.job_id == big and r.started_at < small.completed_at
                 and r.finished_at > small.created_at)
    seconds = small.completed_at - small.created_at
    first = min(r.started_at for r in runs if r.job_id == small_id) - small.created_at
    return {"small_job_seconds": round(seconds, 2), "chunk_seconds": round(chunk_s, 3),
            "first_chunk_started_after_s": round(first, 2),
            "small_job_in_chunk_times": round(seconds / chunk_s, 1),
            "big_chunks_run_meanwhile": during}


def owners(tree: Tree) -> dict[str, Any]:
    alice = tree.owners_job("alice", 40)
    tree.wait(alice, done=3 * CHUNK)
    bob_id = tree.owners_job("bob", 20)
    bob = tree.wait(bob_id)
    tree.wait(alice)
    runs = [r for r in tree.runs() if r.job_id in (alice, bob_id)
            and r.started_at >= bob.created_at]
    both = runs[:max(i for i, r in enumerate(runs) if r.job_id == bob_id) + 1]
    shares = []
    start = bob.created_at
    while start < both[-1].started_at:
        window = [r for r in both if start <= r.started_at < start + WINDOW_S]
        if window:
            shares.append(round(sum(r.job_id == bob_id for r in window) / len(window), 2))
        start += WINDOW_S
    return {"bob_share_while_both_wait": round(sum(r.job_id == bob_id for r in both)
                                               / len(both), 3),
            "chunks_while_both_wait": len(both),
            f"bob_share_per_{WINDOW_S:g}s": shares}


def measure(code: Path, tmp: Path, broker: str) -> dict[str, Any]:
    """The figures of the code in `code`; run from there, as `python -m` puts the current
    directory ahead of PYTHONPATH."""
    here = Path.cwd()
    os.chdir(code)
    tree = Tree(code, tmp, broker)
    tree.service.start_worker(tmp / "worker.log", **PACED)
    try:
        return {"small_behind_big": small_behind_big(tree), "owners": owners(tree)}
    finally:
        tree.service.stop_workers()
        redis.Redis.from_url(broker).delete(tree.service.queue)
        os.chdir(here)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git ref to compare with")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        baseline = unpack(args.baseline, tmp / "baseline")
        started = time.time()
        figures = {"baseline": {"ref": args.baseline,
                                **measure(baseline, tmp / "run-baseline", args.broker_url)},
                   "this": measure(REPO, tmp / "run-this", args.broker_url),
                   "seconds": round(time.time() - started)}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
