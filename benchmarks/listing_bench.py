"""Listing figures, on a baseline commit and on this tree in one run, printed as JSON:
the time of what `GET /v1/batches?limit=100` does for an owner whose 100 jobs wait
(reading the page, every job's place in the queue, the batch objects) while other owners
have 10 / 1,000 / 10,000 jobs waiting at the same queue and priority, on SQLite.

The waiting jobs are inserted in bulk through the storage layer (one queued chunk of 256
requests each, spread over up to 100 other owners); the listing owner has been served
far more than the others (its fair-share tag is ahead), so every other owner's chunks
come before its own: the worst case for a place. Each tree runs with its own code
(PYTHONPATH) in a child process; a baseline listing that passes `--budget` seconds is
stopped and its time estimated from the places it computed (`estimated`: true).

    python benchmarks/listing_bench.py                       # baseline: main
    python benchmarks/listing_bench.py --sizes 10,1000 --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from baseline import unpack  # same folder

REPO = Path(__file__).resolve().parents[1]
LISTED = 100  # the listing owner's waiting jobs, one page
OWNERS = 100  # other owners, at most


def fill(url: str, waiting: int) -> None:
    """`waiting` jobs of other owners and LISTED of alice's, each with one queued chunk."""
    from sqlalchemy import insert

    from dinfer_batch.config import Settings
    from dinfer_batch.storage import db
    from dinfer_batch.storage.tables import Chunk, FairShare, Job

    db.upgrade(url)
    sessions = db.ready(url)
    model = Settings.from_env(os.environ).default_model  # this script is its process's entry
    now = time.time()
    owners = [f"owner-{i:03d}" for i in range(min(waiting, OWNERS))]
    rows = [(owners[i % len(owners)], now - 1000 + i) for i in range(waiting)]
    rows += [("alice", now + i) for i in range(LISTED)]
    jobs = [{"id": f"batch_{uuid.uuid4().hex}", "status": "in_progress",
             "model": model, "queue": "q", "input_file": "", "params": {},
             "meta": {}, "chunk_size": 256, "chunk_count": 1, "total_count": 256,
             "created_at": created, "in_progress_at": created, "owner": owner,
             "priority": 0, "served": 0.0} for owner, created in rows]
    with sessions.begin() as session:
        session.execute(insert(Job), jobs)
        session.execute(insert(Chunk), [{"job_id": job["id"], "chunk_id": 0,
                                         "status": "queued", "size": 256} for job in jobs])
        session.execute(insert(FairShare), [
            {"queue": "q", "priority": 0, "owner": "", "served": 0.0, "job_clock": 0.0},
            {"queue": "q", "priority": 0, "owner": "alice", "served": 1e9,
             "job_clock": 0.0}])


def listing(sessions: Any, budget: float) -> dict[str, Any]:
    """One listing of alice's 100 jobs as the route makes it, timed."""
    from dinfer_batch.jobs.lifecycle import list_jobs
    from dinfer_batch.jobs.reading.view import job_object

    try:  # this tree: the places of a page at once
        from dinfer_batch.jobs.reading.place import places
    except ImportError:  # the baseline: one place at a time
        from dinfer_batch.jobs.running.dispatch import place  # type: ignore[attr-defined]

        def places(sessions: Any, jobs: list[Any]) -> dict[str, Any]:  # type: ignore[misc]
            found, started = {}, time.perf_counter()
            for job in jobs:
                found[job.id] = place(sessions, job)
                if time.perf_counter() - started > budget:
                    break
            return found

    started = time.perf_counter()
    jobs = list_jobs(sessions, None, LISTED + 1, owner="alice")[:LISTED]
    where = places(sessions, jobs)
    objects = [job_object(job, where[job.id]) for job in jobs if job.id in where]
    seconds = time.perf_counter() - started
    done = len(objects)
    return {"seconds": round(seconds * LISTED / done, 3), "estimated": done < LISTED,
            "places_computed": done, "first_place": objects[0]["place"],
            "bytes": len(json.dumps(objects))}


def child(sizes: list[int], budget: float) -> None:
    from dinfer_batch.storage import db

    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for waiting in sizes:
            url = f"sqlite:///{tmp}/{waiting}.db"
            fill(url, waiting)
            sessions = db.ready(url)
            listing(sessions, budget)  # warm: imports, caches, the database's pages
            figures[str(waiting)] = listing(sessions, budget)
    print(json.dumps(figures))


def run_tree(tree: Path, sizes: list[int], budget: float) -> dict[str, Any]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", "--sizes",
                          ",".join(map(str, sizes)), "--budget", str(budget)],
                         env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="git ref to compare with")
    parser.add_argument("--sizes", default="10,1000,10000",
                        help="other owners' waiting jobs, comma-separated")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds a baseline listing may run before it is estimated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.child:
        child(sizes, args.budget)
        return
    with tempfile.TemporaryDirectory() as tmp:
        baseline = unpack(args.baseline, Path(tmp) / "baseline")
        before = run_tree(baseline, sizes, args.budget)
    after = run_tree(REPO, sizes, args.budget)
    print(json.dumps({
        "listed_jobs": LISTED, "other_owners_at_most": OWNERS, "database": "sqlite",
        "baseline": {"ref": args.baseline, **before}, "this_tree": after,
        "speedup": {size: round(before[size]["seconds"] / max(after[size]["seconds"], 1e-9),
                                1) for size in before}}, indent=2))


if __name__ == "__main__":
    main()
