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
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.tiny_model and this module as an engine factory

PROMPTS = ["add 989 796=", "sort 4158486=", "rev xbnr=", "add 12 30="]


class InstantEngine:
    """Stand-in engine: same interface, answers at once (`DINFER_BATCH_ENGINE`)."""

    def __init__(self, model: str, device: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)

    def generate(self, prompts: Sequence[Any], config: Any = None,
                 on_result: Callable[[int, Any], None] | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[Any]:
        from engine import GenerationResult

        results = [GenerationResult(text="42", token_ids=[1, 2], finish_reason="stop",
                                    prompt_tokens=len(p), completion_tokens=2, nfe=1,
                                    seconds=0.0) for p in prompts]
        for index, result in enumerate(results):
            if on_result:
                on_result(index, result)
        return results


def write_prompts(path: Path, count: int) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"custom_id": f"r{i}", "prompt": PROMPTS[i % len(PROMPTS)]})
                      + "\n")
    return path


def cli(env: dict[str, str], *args: str) -> tuple[str, float, float]:
    """Run `dinfer-batch ARGS`; returns (stdout, seconds, the process's peak RSS in MiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "dinfer_batch", *args], env=env,
                                   stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode:
            raise RuntimeError(f"dinfer-batch {' '.join(args)} failed: {err.read()}")
        return out.read().strip(), seconds, usage.ru_maxrss / 1024


class Worker:
    """A `dinfer-batch worker` subprocess, ready (model loaded) once constructed."""

    def __init__(self, env: dict[str, str], model: str, queue: str, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dinfer_batch", "worker", "--model", model,
             "--queues", queue], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        while "ready." not in log.read_text():
            if self.process.poll() is not None:
                raise RuntimeError(f"worker died:\n{log.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def load_job(env: dict[str, str], job_id: str) -> Any:
    from dinfer_batch import db
    from dinfer_batch.jobs import get_job

    return get_job(db.ready(env["DINFER_BATCH_DATABASE_URL"]), job_id)


def wait_ended(env: dict[str, str], job_id: str) -> Any:
    """Poll gently (the figures come from the job's own timestamps, not from polling)."""
    from dinfer_batch.jobs import ENDED

    while (job := load_job(env, job_id)).status not in ENDED:
        time.sleep(0.5)
    if job.status != "completed":
        raise RuntimeError(f"job {job_id} ended {job.status}: {job.error}")
    return job


def engine_seconds(env: dict[str, str], job_id: str) -> float:
    """Time the worker spent inside Engine.generate for the job (sum over its chunks)."""
    from sqlalchemy import func, select

    from dinfer_batch import db
    from dinfer_batch.tables import Chunk

    with db.ready(env["DINFER_BATCH_DATABASE_URL"])() as session:
        return session.scalar(select(func.sum(Chunk.seconds)).where(Chunk.job_id == job_id))


def bench_submit(env: dict[str, str], tmp: Path, lines: int, model: str) -> dict[str, Any]:
    path = write_prompts(tmp / "submit.jsonl", lines)
    job_id, seconds, peak_mib = cli(env, "submit", str(path), "--model", model)
    job = load_job(env, job_id)
    return {"lines": lines, "seconds": round(seconds, 2),
            "lines_per_s": round(lines / seconds), "peak_rss_mib": round(peak_mib, 1),
            "ingest_seconds": round(job.in_progress_at - job.created_at, 2)}


def run_job(env: dict[str, str], path: Path, model: str, *options: str) -> tuple[Any, float]:
    """Submit to the running worker, wait; returns the job and wall seconds."""
    started = time.perf_counter()
    job_id = cli(env, "submit", str(path), "--model", model, *options)[0]
    job = wait_ended(env, job_id)
    return job, time.perf_counter() - started


def bench_overhead(env: dict[str, str], tmp: Path, items: int, model: str) -> dict[str, Any]:
    path = write_prompts(tmp / "overhead.jsonl", items)
    stand_in = env | {"DINFER_BATCH_ENGINE": "benchmarks.service_bench:InstantEngine"}
    worker = Worker(stand_in, model, env["DINFER_BATCH_QUEUE"], tmp / "overhead.log")
    try:
        job, wall = run_job(env, path, model)
    finally:
        worker.stop()
    running = job.completed_at - job.in_progress_at
    return {"items": items, "wall_seconds": round(wall, 2),
            "items_per_s": round(items / wall), "items_per_s_after_submit": round(
                items / running), "chunks": job.chunk_count}


def direct_tokens_per_s(engine: Any, prompts: list[str], config: Any) -> float:
    started = time.perf_counter()
    results = engine.generate(prompts, config)
    return sum(r.completion_tokens for r in results) / (time.perf_counter() - started)


def bench_real(env: dict[str, str], tmp: Path, items: int, model: str,
               max_tokens: int) -> dict[str, Any]:
    """The engine alone, then the service, then the engine alone again (the mean of the two
    direct runs is the reference, so drift in the machine's load shows in neither side)."""
    from engine import Engine, GenerationConfig

    path = write_prompts(tmp / "real.jsonl", items)
    prompts = [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
    config = GenerationConfig(gen_length=max_tokens)
    engine = Engine.from_pretrained(model)
    engine.generate(prompts[:8], config)  # warm-up
    before = direct_tokens_per_s(engine, prompts, config)

    worker = Worker(env, model, env["DINFER_BATCH_QUEUE"], tmp / "real.log")
    try:
        run_job(env, write_prompts(tmp / "warm.jsonl", 8), model, "--max-tokens",
                str(max_tokens))
        job, wall = run_job(env, path, model, "--max-tokens", str(max_tokens))
    finally:
        worker.stop()
    after = direct_tokens_per_s(engine, prompts, config)
    direct_tps = (before + after) / 2
    service_seconds = job.completed_at - job.created_at
    service_tps = job.completion_tokens / service_seconds
    return {"items": items, "max_tokens": max_tokens,
            "service_seconds": round(service_seconds, 2),
            "service_engine_seconds": round(engine_seconds(env, job.id), 2),
            "direct_tokens_per_s": [round(before, 1), round(after, 1)],
            "service_tokens_per_s": round(service_tps, 1),
            "ratio": round(service_tps / direct_tps, 3),
            "service_tokens_per_s_incl_cli_start": round(job.completion_tokens / wall, 1)}


def default_model(tmp: Path) -> str:
    demo = REPO / "models" / "demo"
    if (demo / "config.json").is_file():
        return str(demo)
    from tests.tiny_model import write_tiny_checkpoint

    return str(write_tiny_checkpoint(tmp / "tiny"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--overhead-items", type=int, default=20_000)
    parser.add_argument("--engine-items", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--model", help="default: models/demo, else a tiny random model")
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--threads", type=int,
                        help="torch CPU threads for both the direct engine and the worker")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    import redis

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = args.model or default_model(tmp)
        queue = f"bench_{uuid.uuid4().hex[:8]}"
        env = os.environ | {
            "DINFER_BATCH_DATABASE_URL": args.database_url or f"sqlite:///{tmp / 'bench.db'}",
            "DINFER_BATCH_BROKER_URL": args.broker_url, "DINFER_BATCH_QUEUE": queue,
            "PYTHONPATH": str(REPO)}
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        if not env["DINFER_BATCH_DATABASE_URL"].startswith("sqlite"):
            cli(env, "db", "upgrade")
        broker = redis.Redis.from_url(args.broker_url)
        figures: dict[str, Any] = {"database": env["DINFER_BATCH_DATABASE_URL"].split(":")[0],
                                   "model": model}
        try:
            figures["submit"] = bench_submit(env, tmp, args.lines, model)
            broker.delete(queue)  # nobody is meant to run the submit benchmark's job
            figures["overhead"] = bench_overhead(env, tmp, args.overhead_items, model)
            figures["real_engine"] = bench_real(env, tmp, args.engine_items, model,
                                                args.max_tokens)
        finally:
            broker.delete(queue)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
