"""Node figures, printed as one JSON object:

- reclaim: a node of 2 CPU replicas runs a one-chunk job; the replica holding the chunk is
  SIGKILLed; seconds until another worker has claimed the chunk again (the reaper's
  doing: worker timeout + up to one reaper interval), for each --worker-timeout;
- replicas: service overhead of a node with 3 replicas vs 1 (items/s from the job going
  in progress to completed, the instant stand-in engine, so only the service is measured).

    python benchmarks/fleet_bench.py                          # SQLite, local Redis
    python benchmarks/fleet_bench.py --no-reclaim --database-url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* and benchmarks.*

import redis  # noqa: E402
from sqlalchemy import select  # noqa: E402

from benchmarks.service_bench import (  # noqa: E402
    bench_service,
    cli,
    database_name,
    default_model,
    write_prompts,
)
from dinfer_batch.statuses import ENDED  # noqa: E402
from dinfer_batch.storage.registry import live_on_queue  # noqa: E402
from dinfer_batch.storage.tables import Chunk  # noqa: E402
from tests.service_helpers import Service, wait_for  # noqa: E402

INSTANT = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine"}
PACED = {"DINFER_BATCH_ENGINE": "tests.paced_engine:PacedEngine",
         "DINFER_TEST_ITEM_SECONDS": "0.5"}


def node(service: Service, tmp: Path, replicas: int, **env: str) -> None:
    """Start a node of `replicas` CPU replicas and wait until all heartbeat."""
    service.start_node(tmp / f"node-{uuid.uuid4().hex[:6]}.log", "--replicas", str(replicas),
                       "--device", "cpu", **env)
    wait_for(lambda: len(live_on_queue(service.sessions(), service.queue, 60)) == replicas, 300)


def bench_reclaim(service: Service, tmp: Path, timeout: int) -> dict[str, Any]:
    node(service, tmp, 2, DINFER_BATCH_WORKER_TIMEOUT=str(timeout), **PACED)
    path = write_prompts(tmp / "reclaim.jsonl", 2000)
    job_id = cli(service.env, "submit", str(path), "--chunk-size", "2000")[0]
    try:
        service.wait_job(job_id, lambda j: j.completed_count >= 2, timeout=300)
        with service.sessions()() as session:
            holder = session.scalar(select(Chunk.worker).where(Chunk.job_id == job_id))
        [victim] = [w for w in live_on_queue(service.sessions(), service.queue, 60)
                    if w.id == holder]
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()

        def reclaimed() -> bool:
            with service.sessions()() as session:
                chunk = session.scalar(select(Chunk).where(Chunk.job_id == job_id))
            return chunk.status == "running" and chunk.worker != holder

        wait_for(reclaimed, timeout * 3 + 120, poll=0.1)
        seconds = time.monotonic() - killed
    finally:  # a warm stop gives the chunk back; the cancel closes it
        service.stop_workers()
        cli(service.env, "cancel", job_id)
    return {"worker_timeout_s": timeout, "sigkill_to_reclaimed_s": round(seconds, 1)}


def bench_replicas(service: Service, tmp: Path, replicas: int, items: int) -> dict[str, Any]:
    node(service, tmp, replicas, **INSTANT)
    try:
        path = write_prompts(tmp / f"overhead{replicas}.jsonl", items)
        job_id = cli(service.env, "submit", str(path), "--chunk-size", "64")[0]
        job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=3600)
    finally:
        service.stop_workers()
    seconds = job.completed_at - job.in_progress_at
    return {"replicas": replicas, "items": items, "seconds": round(seconds, 2),
            "items_per_s": round(items / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-timeout", type=int, action="append",
                        help="seconds (repeatable; default: 60, the default, and 15)")
    parser.add_argument("--no-reclaim", action="store_true", help="only the replicas figures")
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        service = bench_service(tmp, default_model(tmp), args.database_url, args.broker_url,
                                OMP_NUM_THREADS="1")
        figures: dict[str, Any] = {"database": database_name(service), "cpus": os.cpu_count()}
        try:
            if not args.no_reclaim:
                figures["reclaim"] = [bench_reclaim(service, tmp, timeout)
                                      for timeout in args.worker_timeout or [60, 15]]
            one, three = (bench_replicas(service, tmp, n, args.items) for n in (1, 3))
            figures["replicas"] = {"one": one, "three": three,
                                   "speedup": round(three["items_per_s"] / one["items_per_s"],
                                                    2)}
        finally:
            redis.Redis.from_url(args.broker_url).delete(service.queue)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
