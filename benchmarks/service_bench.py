"""Service overhead figures, printed as one JSON object:

- submit: a 100,000-line file through `dinfer-batch submit` (lines/s, the process's peak
  RSS, which stays flat however long the file is);
- overhead: end-to-end items/s through Redis + a Celery worker + the database, with the
  engine replaced by an instant stand-in (what the service itself costs);
- real_engine: on the same kind of items with the real engine, the service's end-to-end
  tokens/s (warm worker, submit to completed) divided by the engine's own tokens/s when
  called directly on the same prompts (goal: >= 0.95). Service time runs from the job's
  creation to its completion: ingest, queueing, chunks, engine and result writes.

    python benchmarks/service_bench.py                  # SQLite in a temp dir, local Redis
    python benchmarks/service_bench.py --database-url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* (service helpers, the stand-in engine)

import redis  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from dinfer_batch.statuses import ENDED  # noqa: E402
from dinfer_batch.storage.tables import Chunk, Job  # noqa: E402
from tests.service_helpers import Service  # noqa: E402

PROMPTS = ["add 989 796=", "sort 4158486=", "rev xbnr=", "add 12 30="]


def write_prompts(path: Path, count: int) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"custom_id": f"r{i}", "prompt": PROMPTS[i % len(PROMPTS)]})
                      + "\n")
    return path


def timed_cli(env: dict[str, str], *args: str) -> tuple[str, dict[str, float]]:
    """Run `dinfer-batch ARGS`; returns its stdout and figures: wall seconds, CPU seconds
    (user + system, its child processes' included: on a shared machine lines per CPU
    second is the steadier figure), the process's peak RSS in MiB and the peak of its
    whole process tree's PSS (each shared page split between the processes sharing it:
    what the command's forked helpers add, sampled every 50 ms)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "dinfer_batch", *args], env=env,
                                   stdout=out, stderr=err)
        tree_peak = [0]
        sampler = threading.Thread(target=_sample_tree_pss, args=(process.pid, tree_peak))
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        sampler.join()
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"dinfer-batch {' '.join(args)} failed: {err.read()}")
        return out.read().strip(), {"seconds": seconds,
                                    "cpu_seconds": usage.ru_utime + usage.ru_stime,
                                    "peak_rss_mib": usage.ru_maxrss / 1024,
                                    "peak_tree_pss_mib": tree_peak[0] / 1024}


def _sample_tree_pss(pid: int, peak: list[int]) -> None:
    """Until process `pid` is reaped, the largest sum of PSS (KiB) over it and its
    descendants."""
    while Path(f"/proc/{pid}").exists():
        total, pending = 0, [pid]
        while pending:
            member = pending.pop()
            try:
                total += proc_kib(member, "smaps_rollup", "Pss") or 0
                for task in Path(f"/proc/{member}/task").iterdir():
                    pending += map(int, (task / "children").read_text().split())
            except (OSError, ValueError):
                continue  # it ended meanwhile
        peak[0] = max(peak[0], total)
        time.sleep(0.05)


def proc_kib(pid: int, name: str, field: str) -> int | None:
    """A `Field:   N kB` figure of /proc/PID/NAME (status, smaps_rollup); None without it."""
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def cli(env: dict[str, str], *args: str) -> tuple[str, float, float]:
    """Run `dinfer-batch ARGS`; returns (stdout, seconds, the process's peak RSS in MiB)."""
    stdout, figures = timed_cli(env, *args)
    return stdout, figures["seconds"], figures["peak_rss_mib"]


def bench_service(tmp: Path, model: Path, database_url: str | None, broker_url: str,
                  **extra_env: str) -> Service:
    """An isolated service for one benchmark: its own queue, and SQLite under `tmp` unless
    `database_url` names another database (migrated here)."""
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    env = {"DINFER_BATCH_DATABASE_URL": database_url or f"sqlite:///{tmp / 'bench.db'}",
           "DINFER_BATCH_BROKER_URL": broker_url, "DINFER_BATCH_QUEUE": queue,
           "DINFER_BATCH_MODEL": str(model), "PYTHONPATH": str(REPO), **extra_env}
    service = Service(env=os.environ | env, queue=queue, model=model)
    if database_url and not database_url.startswith("sqlite"):
        cli(service.env, "db", "upgrade")
    return service


def database_name(service: Service) -> str:
    return service.env["DINFER_BATCH_DATABASE_URL"].split(":")[0]


def engine_seconds(service: Service, job_id: str) -> float:
    """Time the worker spent inside Engine.generate for the job (sum over its chunks)."""
    with service.sessions()() as session:
        return session.scalar(select(func.sum(Chunk.seconds)).where(Chunk.job_id == job_id))


def bench_submit(service: Service, tmp: Path, lines: int) -> dict[str, Any]:
    path = write_prompts(tmp / "submit.jsonl", lines)
    job_id, seconds, peak_mib = cli(service.env, "submit", str(path))
    job = service.job(job_id)
    return {"lines": lines, "seconds": round(seconds, 2),
            "lines_per_s": round(lines / seconds), "peak_rss_mib": round(peak_mib, 1),
            "ingest_seconds": round(job.in_progress_at - job.created_at, 2)}


def run_job(service: Service, path: Path, *options: str) -> tuple[Job, float]:
    """Submit to the running worker and wait; returns the job and wall seconds."""
    started = time.perf_counter()
    job_id = cli(service.env, "submit", str(path), *options)[0]
    job = service.wait_job(job_id, lambda j: j.status in ENDED, timeout=24 * 3600)
    if job.status != "completed":
        raise RuntimeError(f"job {job_id} ended {job.status}: {job.error}")
    return job, time.perf_counter() - started


def bench_overhead(service: Service, tmp: Path, items: int) -> dict[str, Any]:
    path = write_prompts(tmp / "overhead.jsonl", items)
    service.start_worker(tmp / "overhead.log",
                         DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine")
    try:
        job, wall = run_job(service, path)
    finally:
        service.stop_workers()
    running = job.completed_at - job.in_progress_at
    return {"items": items, "wall_seconds": round(wall, 2),
            "items_per_s": round(items / wall),
            "items_per_s_after_submit": round(items / running), "chunks": job.chunk_count}


def direct_tokens_per_s(engine: Any, prompts: list[str], config: Any) -> float:
    started = time.perf_counter()
    results = engine.generate(prompts, config)
    return sum(r.completion_tokens for r in results) / (time.perf_counter() - started)


def bench_real(service: Service, tmp: Path, items: int, max_tokens: int) -> dict[str, Any]:
    """The engine alone, then the service, then the engine alone again (the mean of the two
    direct runs is the reference, so drift in the machine's load shows in neither side)."""
    from dinfer_engine import Engine, GenerationConfig

    path = write_prompts(tmp / "real.jsonl", items)
    prompts = [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
    config = GenerationConfig(gen_length=max_tokens)
    engine = Engine.from_pretrained(service.model)
    engine.generate(prompts[:8], config)  # warm-up
    before = direct_tokens_per_s(engine, prompts, config)

    service.start_worker(tmp / "real.log")
    try:
        run_job(service, write_prompts(tmp / "warm.jsonl", 8), "--max-tokens", str(max_tokens))
        job, wall = run_job(service, path, "--max-tokens", str(max_tokens))
    finally:
        service.stop_workers()
    after = direct_tokens_per_s(engine, prompts, config)
    service_seconds = job.completed_at - job.created_at
    service_tps = job.completion_tokens / service_seconds
    return {"items": items, "max_tokens": max_tokens,
            "service_seconds": round(service_seconds, 2),
            "service_engine_seconds": round(engine_seconds(service, job.id), 2),
            "direct_tokens_per_s": [round(before, 1), round(after, 1)],
            "service_tokens_per_s": round(service_tps, 1),
            "ratio": round(service_tps / ((before + after) / 2), 3),
            "service_tokens_per_s_incl_cli_start": round(job.completion_tokens / wall, 1)}


def default_model(tmp: Path) -> Path:
    demo = REPO / "dinfer_models" / "demo"
    if (demo / "config.json").is_file():
        return demo
    from tests.tiny_model import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp / "tiny")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--overhead-items", type=int, default=20_000)
    parser.add_argument("--engine-items", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--model", help="default: dinfer_models/demo, else a tiny random model")
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--threads", type=int,
                        help="torch CPU threads for both the direct engine and the worker")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = Path(args.model) if args.model else default_model(tmp)
        threads = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
        service = bench_service(tmp, model, args.database_url, args.broker_url, **threads)
        queue = service.queue
        broker = redis.Redis.from_url(args.broker_url)
        figures: dict[str, Any] = {"database": database_name(service), "model": str(model)}
        try:
            figures["submit"] = bench_submit(service, tmp, args.lines)
            broker.delete(queue)  # nobody is meant to run the submit benchmark's job
            figures["overhead"] = bench_overhead(service, tmp, args.overhead_items)
            figures["real_engine"] = bench_real(service, tmp, args.engine_items,
                                                args.max_tokens)
        finally:
            broker.delete(queue)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
