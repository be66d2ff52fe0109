"""Dataset synthesis figures, printed as one JSON object: a 10,000-line vars file rendered
through a template with n=4 samples per line, from `dinfer-batch submit --template --vars`
to chunks queued in Redis (lines/s, the process's peak RSS), beside the same requests
submitted as a pre-rendered JSONL file (what the template costs).

    python benchmarks/synth_bench.py                  # SQLite in a temp dir, local Redis
    python benchmarks/synth_bench.py --database-url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from benchmarks.service_bench import (  # noqa: E402
    bench_service,
    cli,
    database_name,
    default_model,
)
from tests.service_helpers import Service  # noqa: E402

TEMPLATE = "add {a} {b}="


def write_vars(path: Path, count: int) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"custom_id": f"v{i}", "a": i % 1000, "b": i // 1000}) + "\n")
    return path


def write_rendered(path: Path, count: int, n: int) -> Path:
    with path.open("w") as out:
        for i in range(count):
            prompt = TEMPLATE.format(a=i % 1000, b=i // 1000)
            out.write(json.dumps({"custom_id": f"v{i}", "prompt": prompt, "n": n}) + "\n")
    return path


def measure(service: Service, broker: redis.Redis, lines: int, *args: str) -> dict[str, Any]:
    """`seconds` and `lines_per_s` include the command's start (imports); `ingest_*` is the
    job's own time from creation to queued chunks."""
    job_id, seconds, peak_mib = cli(service.env, "submit", *args)
    job = service.job(job_id)
    queued = broker.llen(service.queue)
    broker.delete(service.queue)
    return {"lines": lines, "seconds": round(seconds, 2), "lines_per_s": round(lines / seconds),
            "ingest_seconds": round(job.in_progress_at - job.created_at, 2),
            "ingest_lines_per_s": round(lines / (job.in_progress_at - job.created_at)),
            "peak_rss_mib": round(peak_mib, 1), "chunks": job.chunk_count,
            "chunks_queued": queued}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = default_model(tmp)
        service = bench_service(tmp, model, args.database_url, args.broker_url)
        broker = redis.Redis.from_url(args.broker_url)
        sampling = ("--n", str(args.n), "--temperature", "0.7")
        try:
            template = measure(service, broker, args.lines, "--template", TEMPLATE, "--vars",
                               str(write_vars(tmp / "vars.jsonl", args.lines)), *sampling)
            rendered = measure(service, broker, args.lines,
                               str(write_rendered(tmp / "rendered.jsonl", args.lines, args.n)),
                               "--temperature", "0.7")
        finally:
            broker.delete(service.queue)
    print(json.dumps({"model": model.name, "database": database_name(service), "n": args.n,
                      "samples": args.lines * args.n,
                      "template_submit": template,
                      "rendered_file_submit": rendered}, indent=2))


if __name__ == "__main__":
    main()
