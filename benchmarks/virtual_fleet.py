"""Virtual workers for benchmarks/scale_sim.py --virtual: one process running COUNT
workers' real loops as threads, each worker with what a `dinfer-batch worker` process has
of its own: its connection pool (the process's budget, DINFER_BATCH_DB_POOL_SIZE +
DB_MAX_OVERFLOW), its ChunkRunner (claim, result writes,
finish, top-up: dinfer_batch.fleet.replica.ReplicaHandler), its heartbeat thread and its
reaper thread. The engine is the stand-in (DINFER_BATCH_ENGINE, sleeping the modelled
engine time); the process's workers share one Broker (a Celery app and a Redis client)
to publish, and each takes its permits off the queue's Redis list itself (BRPOP) instead
of through a Celery consumer. Every claim's latency (ms) goes to STATS as
`[unix time, ms]` lines. Prints `ready: COUNT` once every worker heartbeats.

    python benchmarks/virtual_fleet.py --first 0 --count 250 --stats claims-0.jsonl

The settings come from the environment as a worker's do (Settings.from_env); `--code`
in scale_sim.py runs this file against another checkout's service code."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.fleet.heartbeat import Heartbeat
from dinfer_batch.fleet.reaper import Reaper, Tenure, reap_interval
from dinfer_batch.fleet.replica import ReplicaHandler
from dinfer_batch.jobs.running.engine_options import configure_engines
from dinfer_batch.jobs.running.runner import ChunkRunner
from dinfer_batch.storage import db, registry
from dinfer_batch.storage.registry import WorkerState
from dinfer_workers.broker import Broker
from dinfer_workers.engine_cache import EngineCache

STAGGER_S = 0.05  # between two workers' starts in one process


class Claims:
    """Claim latencies, written out every second (and at the end)."""

    def __init__(self, path: Path) -> None:
        self.path, self.lock = path, threading.Lock()
        self.pending: list[list[float]] = []

    def timed(self, claim: Callable[[str], Any]) -> Callable[[str], Any]:
        def timed_claim(queue: str) -> Any:
            started = time.monotonic()
            claimed = claim(queue)
            if claimed is not None:
                with self.lock:
                    self.pending.append([time.time(), 1000 * (time.monotonic() - started)])
            return claimed
        return timed_claim

    def flush(self) -> None:
        with self.lock:
            lines, self.pending = self.pending, []
        with self.path.open("a") as out:
            out.writelines(json.dumps(line) + "\n" for line in lines)


def sessions_of(config: Settings) -> Any:
    """This virtual worker's own engine and pool, as a process has (a new one each, past
    db_engine's per-URL cache; no per-worker application_name, which PgBouncer would SET
    on every transaction). A checkout before the connection budget has no db_pool."""
    pool = getattr(config, "db_pool", None)
    make = db.db_engine.__wrapped__
    engine = make(config.database_url, pool) if pool is not None else make(config.database_url)
    return sessionmaker(engine, class_=db._Session, expire_on_commit=False)


def virtual_worker(index: int, config: Settings, engines: EngineCache, broker: Broker,
                   claims: Claims, stop: threading.Event, started: threading.Barrier) -> None:
    try:
        handler = restarted(lambda: start_worker(index, config, engines, broker, claims))
    except Exception as exc:  # the database refused it, say: the process fails to start
        print(f"vw{index} could not start: {type(exc).__name__}: "
              + " ".join(str(exc).split())[:300], flush=True)
        started.abort()
        return
    permits = redis.Redis.from_url(config.broker_url)
    started.wait()
    while not stop.is_set():
        if permits.brpop([config.default_queue], timeout=1) is not None:
            handler(config.default_queue)


def restarted(start: Callable[[], ReplicaHandler]) -> ReplicaHandler:
    """A worker whose start fails on the database (a connect timing out while a whole
    fleet connects) starts again, as the node's supervisor restarts a replica: 3 tries."""
    for _ in range(2):
        try:
            return start()
        except OperationalError as exc:
            print(f"restarting a worker: {' '.join(str(exc.orig).split())[:200]}", flush=True)
            time.sleep(5)
    return start()


def start_worker(index: int, config: Settings, engines: EngineCache, broker: Broker,
                 claims: Claims) -> ReplicaHandler:
    """Register virtual worker `index` and start its heartbeat and reaper threads."""
    sessions = sessions_of(config)
    worker_id = f"vw{index}@virtual/{uuid.uuid4().hex[:8]}"
    runner = ChunkRunner(sessions, device="cpu", worker=worker_id,
                         batch_items=config.engine_batch_items, config=config,
                         engines=engines)
    runner.claim_next_chunk = claims.timed(runner.claim_next_chunk)
    state = WorkerState()
    registry.register(sessions, worker_id, f"vw{index}", config.default_model, "cpu",
                      [config.default_queue])
    tenure = Tenure(worker_id, reap_interval(config.heartbeat_seconds))
    heartbeat = Heartbeat(sessions, worker_id, state, config.heartbeat_seconds,
                          config.worker_timeout, also=tenure.ask_in)
    heartbeat.start()
    Reaper(sessions, broker, config.worker_timeout).start(tenure)
    return ReplicaHandler(runner, state, broker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="the first worker's number")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--stats", type=Path, required=True)
    args = parser.parse_args()
    config = Settings.from_env(os.environ)
    engines = configure_engines(1, config)
    engines(config.default_model, "cpu")  # loaded once, before the threads share it
    broker = Broker(config.broker_url, config.visibility_timeout)
    claims, stop = Claims(args.stats), threading.Event()
    started = threading.Barrier(args.count + 1)
    for index in range(args.first, args.first + args.count):
        threading.Thread(target=virtual_worker, daemon=True, name=f"vw{index}",
                         args=(index, config, engines, broker, claims, stop, started)).start()
        time.sleep(STAGGER_S)  # nodes come up over seconds, not all in one instant
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        started.wait()
    except threading.BrokenBarrierError:
        raise SystemExit(1) from None  # the first worker that could not start said why
    print(f"ready: {args.count}", flush=True)
    while not stop.wait(1.0):
        claims.flush()
    claims.flush()
    os._exit(0)  # the reapers' threads are not daemons; the fleet's own stop needs none


if __name__ == "__main__":
    main()
