"""Submit and results at scale, printed as one JSON object:

- submit: `dinfer-batch submit` of a mixed file (plain prompts, chat messages, OpenAI
  batch lines with per-line parameters and seeds, stop strings; 1,000,000 lines by
  default): lines/s and the process's peak RSS (goal: >= 50,000 lines/s, <= 300 MB);
- results: `dinfer-batch results JOB -o FILE` of that job once every item has an answer
  (written straight into SQL here: this measures the service's reading, not a model):
  lines/s and peak RSS (goal: >= 100,000 lines/s in bounded memory).

    python benchmarks/submit_bench.py                   # SQLite in a temporary directory
    createdb -h 127.0.0.1 -U postgres dinfer_bench
    python benchmarks/submit_bench.py \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/dinfer_bench
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from service_bench import REPO, bench_service, timed_cli  # same folder: run as a script
from sqlalchemy import update

from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job


def mixed_line(i: int) -> dict[str, Any]:
    """One of four shapes, each with its own overrides, as real files mix them."""
    shape = i % 4
    if shape == 0:
        return {"custom_id": f"r{i}", "prompt": f"add {i % 997} {i % 389}="}
    if shape == 1:
        return {"custom_id": f"r{i}", "max_tokens": 16,
                "messages": [{"role": "user", "content": f"sort {i}"}]}
    if shape == 2:
        return {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                "body": {"model": "demo", "prompt": f"rev abc{i}", "max_tokens": 16,
                         "temperature": 0.5, "seed": i}}
    return {"prompt": f"add {i} 1=", "stop": ["\n"]}


def write_mixed(path: Path, count: int) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps(mixed_line(i)) + "\n")
    return path


def rates(lines: int, run: dict[str, float]) -> dict[str, float]:
    return {"seconds": round(run["seconds"], 2), "lines_per_s": round(lines / run["seconds"]),
            "cpu_seconds": round(run["cpu_seconds"], 2),
            "lines_per_cpu_s": round(lines / run["cpu_seconds"]),
            "peak_rss_mib": round(run["peak_rss_mib"], 1),
            "peak_tree_pss_mib": round(run["peak_tree_pss_mib"], 1)}


def answer_everything(url: str, job_id: str) -> None:
    """Give every pending item an answer and end the job, as workers would have."""
    sessions = db.sessions(url)
    now = time.time()
    with sessions.begin() as session:
        done = session.execute(
            update(Item).where(Item.job_id == job_id, Item.status == "pending")
            .values(status="completed", output_text="42", finish_reason="stop",
                    prompt_tokens=8, completion_tokens=2, nfe=1, latency_s=0.01,
                    finished_at=now)).rowcount
        session.execute(update(Job).where(Job.id == job_id).values(
            status="completed", completed_count=done, completion_tokens=2 * done,
            prompt_tokens=8 * done, finalizing_at=now, completed_at=now))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        service = bench_service(tmp, REPO / "dinfer_models" / "demo", args.database_url,
                                args.broker_url)
        env, queue = service.env, service.queue
        url = env["DINFER_BATCH_DATABASE_URL"]
        path = write_mixed(tmp / "mixed.jsonl", args.lines)
        broker = redis.Redis.from_url(args.broker_url)
        try:
            job_id, submit = timed_cli(env, "submit", str(path))
            queued = broker.llen(queue)  # permits: a window, whatever the job's size
        finally:
            broker.delete(queue)  # no worker runs this job
        answer_everything(url, job_id)
        out = tmp / "results.jsonl"
        _, results = timed_cli(env, "results", job_id, "-o", str(out))
        with out.open() as lines:
            written = sum(1 for _ in lines)
        figures = {"database": url.split(":")[0], "lines": args.lines,
                   "file_mb": round(path.stat().st_size / 1e6, 1),
                   "results_mb": round(out.stat().st_size / 1e6, 1),
                   "submit": rates(args.lines, submit), "results": rates(written, results),
                   "messages_in_redis": queued}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
