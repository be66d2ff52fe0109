"""Peak memory of the API server while a large batch file is uploaded and turned into a
batch: the upload is streamed to disk and ingest streams the file into SQL, so the peak
should not grow with the file.

Starts `dinfer-batch api` on a free port (temporary SQLite database and files
directory, the given model, a throwaway queue on the local Redis), uploads LINES request
lines with the official `openai` client, creates a batch, and prints one JSON object:
file size, upload and create times, the server's resident memory after start-up and its
peak (VmHWM) after the upload and after the batch was created.

    python benchmarks/api_upload_memory.py --lines 100000
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import redis
from api_server import create_key, start_api  # same folder: run as a script
from openai import OpenAI
from service_bench import proc_kib

REPO = Path(__file__).resolve().parents[1]


def memory_mb(pid: int, field: str) -> float:
    kib = proc_kib(pid, "status", field)
    if kib is None:
        raise RuntimeError(f"{field} not in /proc/{pid}/status")
    return round(kib / 1024, 1)


def write_file(path: Path, lines: int) -> None:
    with path.open("w") as out:
        for i in range(lines):
            out.write(json.dumps({"custom_id": f"req-{i}", "method": "POST",
                                  "url": "/v1/completions",
                                  "body": {"model": "demo", "prompt": f"add {i % 997} 3=",
                                           "max_tokens": 16}}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--model", default=str(REPO / "dinfer_models" / "demo"))
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="api-upload-"))
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    env = os.environ | {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{work / 'db.sqlite'}",
                        "DINFER_BATCH_FILES_DIR": str(work / "files"),
                        "DINFER_BATCH_MODEL": args.model, "DINFER_BATCH_QUEUE": queue,
                        "DINFER_BATCH_BROKER_URL": args.broker, "PYTHONPATH": str(REPO)}
    key = create_key(REPO, env, "bench")
    server, url = start_api(REPO, env)
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=3600)
        path = work / "big.jsonl"
        write_file(path, args.lines)
        started_mb = memory_mb(server.pid, "VmRSS")
        start = time.perf_counter()
        with path.open("rb") as handle:
            uploaded = client.files.create(file=handle, purpose="batch")
        upload_s = time.perf_counter() - start
        after_upload_mb = memory_mb(server.pid, "VmHWM")
        start = time.perf_counter()
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions",
                                      completion_window="24h")
        create_s = time.perf_counter() - start
        after_batch_mb = memory_mb(server.pid, "VmHWM")
        client.batches.cancel(batch.id)
        print(json.dumps({
            "lines": args.lines, "file_bytes": uploaded.bytes,
            "upload_s": round(upload_s, 2), "create_batch_s": round(create_s, 2),
            "batch_status": batch.status, "requests": batch.request_counts.total,
            "server_rss_after_start_mb": started_mb,
            "server_peak_rss_after_upload_mb": after_upload_mb,
            "server_peak_rss_after_create_mb": after_batch_mb,
        }, indent=2))
    finally:
        server.terminate()
        server.wait(30)
        redis.Redis.from_url(args.broker).delete(queue)


if __name__ == "__main__":
    main()
