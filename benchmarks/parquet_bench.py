"""Parquet in and out, and large result downloads, printed as one JSON object:

- submit: the same rows (prompt, custom_id and two metadata columns) submitted as a
  Parquet file and as JSONL, both with `--prompt-column prompt`, one run each: rows/s,
  CPU-s and peak RSS of each `dinfer-batch submit`;
- download: the Parquet job's output file (every item given an answer of
  `--answer-chars` characters straight in SQL, as workers would have: this measures the
  reading, not a model; each answer starts with its line number, so that no two are
  equal) fetched from a real `dinfer-batch api` once whole, then again
  through forced connection drops resumed with Range + If-Range: seconds, the bytes'
  SHA-256 (equal), and the server's peak RSS (VmHWM) after each;
- parquet_out: `dinfer-batch results JOB --format parquet -o FILE`: seconds, rows/s, peak
  RSS, file size.

    python benchmarks/parquet_bench.py --rows 1000000 --answer-chars 700   # ~1 GB output
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import pyarrow as pa
import pyarrow.parquet as pq
import redis
from api_server import create_key, start_api  # same folder
from service_bench import REPO, bench_service, proc_kib, timed_cli
from sqlalchemy import String, update
from submit_bench import rates

from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job


def write_inputs(tmp: Path, rows: int) -> tuple[Path, Path]:
    """The same rows as Parquet (row groups of 100,000) and as JSONL."""
    parquet, jsonl = tmp / "rows.parquet", tmp / "rows.jsonl"
    with pq.ParquetWriter(parquet, pa.schema([("custom_id", pa.string()),
                                              ("prompt", pa.string()),
                                              ("source", pa.string()),
                                              ("score", pa.float64())])) as writer, \
            jsonl.open("w") as out:
        for start in range(0, rows, 100_000):
            group = {"custom_id": [f"r{i}" for i in range(start, min(rows, start + 100_000))]}
            count = len(group["custom_id"])
            group["prompt"] = [f"add {i % 997} {i % 389}=" for i in range(start, start + count)]
            group["source"] = [f"set-{i % 7}" for i in range(start, start + count)]
            group["score"] = [i / 3 for i in range(start, start + count)]
            writer.write_table(pa.table(group))
            for i in range(count):
                out.write(json.dumps({name: values[i] for name, values in group.items()})
                          + "\n")
    return parquet, jsonl


def answer_everything(url: str, job_id: str, chars: int) -> None:
    sessions = db.sessions(url)
    now = time.time()
    answer = ("lorem ipsum " * (chars // 12 + 1))[:chars]
    with sessions.begin() as session:
        done = session.execute(
            update(Item).where(Item.job_id == job_id, Item.status == "pending")
            .values(status="completed", output_text=Item.line.cast(String) + answer,
                    finish_reason="stop",
                    prompt_tokens=8, completion_tokens=chars // 4, nfe=1, latency_s=0.01,
                    finished_at=now)).rowcount
        session.execute(update(Job).where(Job.id == job_id).values(
            status="completed", completed_count=done, finalizing_at=now, completed_at=now,
            owner="bench"))  # the API key's owner (the CLI's own, local, has no key)


def download(client: httpx.Client, path: str, drop_every: int | None) -> dict[str, object]:
    """The file through connections each dropped after `drop_every` bytes (None: one)."""
    started = time.perf_counter()
    sha, got, drops, size, etag = hashlib.sha256(), 0, 0, None, None
    while size is None or got < size:
        headers = {"Range": f"bytes={got}-", "If-Range": etag} if got else {}
        with client.stream("GET", path, headers=headers) as response:
            if size is None:
                size, etag = int(response.headers["content-length"]), response.headers["etag"]
            taken = 0
            for chunk in response.iter_raw(1 << 20):
                sha.update(chunk)
                got += len(chunk)
                taken += len(chunk)
                if drop_every and taken >= drop_every and got < size:
                    drops += 1
                    break
    return {"bytes": got, "seconds": round(time.perf_counter() - started, 2),
            "drops": drops, "sha256": sha.hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--answer-chars", type=int, default=700)
    parser.add_argument("--drops", type=int, default=5, help="forced drops in the resumed "
                                                              "download")
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        service = bench_service(tmp, REPO / "dinfer_models" / "demo", args.database_url,
                                args.broker_url)
        env, url = service.env, service.env["DINFER_BATCH_DATABASE_URL"]
        parquet, jsonl = write_inputs(tmp, args.rows)
        broker = redis.Redis.from_url(args.broker_url)
        try:
            job_id, parquet_run = timed_cli(env, "submit", str(parquet), "--prompt-column",
                                            "prompt")
            _, jsonl_run = timed_cli(env, "submit", str(jsonl), "--prompt-column", "prompt")
        finally:
            broker.delete(service.queue)  # no worker runs these jobs
        figures: dict[str, object] = {
            "database": url.split(":")[0], "rows": args.rows,
            "parquet_mb": round(parquet.stat().st_size / 1e6, 1),
            "jsonl_mb": round(jsonl.stat().st_size / 1e6, 1),
            "submit_parquet": rates(args.rows, parquet_run),
            "submit_jsonl": rates(args.rows, jsonl_run),
            "parquet_vs_jsonl_rows_per_s": round(jsonl_run["seconds"] / parquet_run["seconds"],
                                                 2)}
        answer_everything(url, job_id, args.answer_chars)
        api_env = os.environ | env | {"DINFER_BATCH_FILES_DIR": str(tmp / "files")}
        key = create_key(REPO, api_env, "bench")
        server, api_url = start_api(REPO, api_env)
        try:
            client = httpx.Client(base_url=api_url, timeout=600,
                                  headers={"Authorization": f"Bearer {key}"})
            batch = client.get(f"/v1/batches/{job_id}").json()
            path = f"/v1/files/{batch['output_file_id']}/content"
            rss_before = proc_kib(server.pid, "status", "VmRSS") or 0
            started = time.perf_counter()
            head = client.head(path)
            first_head_s = time.perf_counter() - started
            size = int(head.headers["content-length"])
            clean = download(client, path, None)
            clean_peak = proc_kib(server.pid, "status", "VmHWM") or 0
            resumed = download(client, path, size // (args.drops + 1) + 1)
            resumed_peak = proc_kib(server.pid, "status", "VmHWM") or 0
            figures["download"] = {
                "file_mb": round(size / 1e6, 1), "first_head_s": round(first_head_s, 2),
                "clean": clean, "resumed": resumed,
                "same_bytes": clean["sha256"] == resumed["sha256"],
                "server_rss_before_mib": round(rss_before / 1024, 1),
                "server_peak_rss_after_clean_mib": round(clean_peak / 1024, 1),
                "server_peak_rss_after_resumed_mib": round(resumed_peak / 1024, 1)}
        finally:
            server.terminate()
            server.wait(30)
        out = tmp / "results.parquet"
        _, written = timed_cli(env, "results", job_id, "--format", "parquet", "-o", str(out))
        figures["parquet_out"] = rates(args.rows, written) | {
            "file_mb": round(out.stat().st_size / 1e6, 1),
            "rows_read_back": pq.ParquetFile(out).metadata.num_rows}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
