"""A worker's service CPU per item, without Celery or Redis: one process claims and runs
every chunk of a job with the instant stand-in engine (tests/stand_in_engines.py) against
a private PostgreSQL database (or SQLite), as a worker's dispatch handler does. Prints
JSON: items, wall and CPU seconds, CPU ms per item (the process's, and the part spent on
threads other than the one that called the engine, i.e. off the engine's thread), and
with --profile the functions that took the most CPU (cProfile on the process's CPU
clock, cumulative).

    python benchmarks/runner_cpu.py                      # 4,096 items, chunks of 64, 0.25 s
    python benchmarks/runner_cpu.py --items 2048 --profile 25
    python benchmarks/runner_cpu.py --database-url sqlite:////tmp/x.db
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* (the stand-in engine)

import psycopg  # noqa: E402

from dinfer_batch.config import Settings  # noqa: E402
from dinfer_batch.jobs.intake.ingest import ingest  # noqa: E402
from dinfer_batch.jobs.running.engine_options import configure_engines  # noqa: E402
from dinfer_batch.jobs.running.runner import ChunkRunner  # noqa: E402
from dinfer_batch.jobs.spec import JobSpec  # noqa: E402
from dinfer_batch.model_info import load_model_info  # noqa: E402
from dinfer_batch.storage import db  # noqa: E402
from dinfer_models import MODELS_DIR  # noqa: E402

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


def private_database() -> tuple[str, str]:
    """A database of this run's own on the local PostgreSQL: (its name, its URL)."""
    name = f"runner_cpu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name, f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_database(name: str) -> None:
    db.db_engine.cache_clear()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def thread_cpu() -> float:
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def run(url: str, items: int, chunk_size: int, engine_seconds: float,
        profile: int) -> dict[str, Any]:
    db.upgrade(url)
    sessions = db.ready(url)
    config = Settings.from_env(os.environ | {
        "DINFER_BATCH_DATABASE_URL": url,
        "DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine"})
    os.environ["STAND_IN_SECONDS_PER_CALL"] = str(engine_seconds)  # read by the stand-in
    engines = configure_engines(1, config)
    queue = f"cpu_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_text("".join(json.dumps({"prompt": f"add {i} {i}="}) + "\n"
                                for i in range(items)))
        spec = JobSpec(model=load_model_info(str(MODELS_DIR / "demo"), MODELS_DIR),
                       queue=queue, chunk_size=chunk_size)
        ingest(sessions, path, spec, config)
    runner = ChunkRunner(sessions, device="cpu", worker="cpu/1", batch_items=256,
                         config=config, engines=engines)
    runner.run_claimed(*runner.claim_next_chunk(queue) or ())  # warm: the engine loaded
    profiler = cProfile.Profile(time.process_time) if profile else None
    wall, cpu, own = time.perf_counter(), time.process_time(), thread_cpu()
    if profiler:
        profiler.enable()
    done = 0
    while (claimed := runner.claim_next_chunk(queue)) is not None:
        runner.run_claimed(*claimed)
        done += len(claimed[2])
    runner.writes.shutdown(wait=True)  # its writer thread's work counts too (the job's end)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    own = thread_cpu() - own
    figures = {"items": done, "chunk_size": chunk_size, "engine_seconds": engine_seconds,
               "database": url.split(":")[0],
               "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "cpu_ms_per_item": round(1000 * cpu / done, 3),
               "engine_thread_cpu_ms_per_item": round(1000 * own / done, 3),
               "other_threads_cpu_ms_per_item": round(1000 * (cpu - own) / done, 3),
               "threads": threading.active_count()}
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(profile)
        figures["profile"] = out.getvalue().splitlines()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--engine-seconds", type=float, default=0.25,
                        help="modelled engine time of one chunk (its results land one by "
                        "one over it)")
    parser.add_argument("--database-url", help="default: a private database on the local "
                        "PostgreSQL (127.0.0.1:5432, user postgres), dropped afterwards")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N functions with the most cumulative CPU")
    args = parser.parse_args()
    name, url = (None, args.database_url) if args.database_url else private_database()
    try:
        figures = run(url, args.items + args.chunk_size, args.chunk_size,
                      args.engine_seconds, args.profile)
    finally:
        if name:
            drop_database(name)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
