"""What hostile clients cost the API server (#17), for this tree and, with `--before DIR`,
for another checkout of the project (e.g. main: `git archive main | tar -x -C DIR`), in
one run, side by side:

- `line_10mb` (and `line_3mb`, under the line limit): the server's memory growth (peak
  RSS over its RSS after start) while a file holding one such prompt line is uploaded
  and made into a batch;
- `unauthenticated_upload_100mb` and `unauthenticated_json_100mb`: memory growth and
  seconds to the answer for a 100 MB chunked upload to /v1/files, and a 100 MB JSON body
  to /v1/batches, sent without a key;
- `healthz_under_metrics`: seconds /healthz takes to answer while 100 clients scrape
  /metrics with an admin key, and how long SIGTERM then takes to stop the server.

Each measurement runs on a fresh `dinfer-batch api` (temporary SQLite database and files
directory, the demo model, a throwaway queue on the local Redis). Prints one JSON object.

    python benchmarks/hostile_bench.py --before /tmp/main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx2 as httpx
import redis
from api_server import create_key, start_api  # same folder: run as a script
from service_bench import proc_kib

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
WAIT_S = 60.0


class Server:
    """A `dinfer-batch api` of the tree at `root`, with an admin key."""

    def __init__(self, root: Path, broker: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="hostile-"))
        self.queue = f"bench_{uuid.uuid4().hex[:8]}"
        self.broker = broker
        self.env = os.environ | {
            "DINFER_BATCH_DATABASE_URL": f"sqlite:///{self.work / 'db.sqlite'}",
            "DINFER_BATCH_FILES_DIR": str(self.work / "files"),
            "DINFER_BATCH_MODEL": str(root / "dinfer_models" / "demo"),
            "DINFER_BATCH_QUEUE": self.queue, "DINFER_BATCH_BROKER_URL": broker,
            "PYTHONPATH": str(root)}
        self.key = create_key(root, self.env, "bench", "--admin")
        self.process, self.url = start_api(root, self.env)
        time.sleep(1)  # let start-up settle before the baseline
        self.start_mb = self.mb("VmRSS")

    def mb(self, field: str) -> float:
        return round((proc_kib(self.process.pid, "status", field) or 0) / 1024, 1)

    def growth_mb(self) -> float:
        return round(self.mb("VmHWM") - self.start_mb, 1)

    def stop(self) -> float:
        """Seconds SIGTERM takes to end the server (killed after WAIT_S)."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        redis.Redis.from_url(self.broker).delete(self.queue)
        shutil.rmtree(self.work, ignore_errors=True)
        return round(time.monotonic() - start, 2)


def line_10mb(server: Server, size: int = 10 * MB) -> dict[str, Any]:
    path = server.work / "long.jsonl"
    prompt = "add 1 2 " * (size // 8)
    path.write_text(json.dumps({"prompt": prompt, "max_tokens": 16}) + "\n"
                    + json.dumps({"prompt": "add 1 2=", "max_tokens": 16}) + "\n")
    http = httpx.Client(base_url=server.url, timeout=600,
                        headers={"Authorization": f"Bearer {server.key}"})
    start = time.monotonic()
    file_id = http.post("/v1/files", files={"file": ("long.jsonl", path.read_bytes())},
                        data={"purpose": "batch"}).json()["id"]
    batch = http.post("/v1/batches", json={"input_file_id": file_id,
                                           "endpoint": "/v1/completions",
                                           "completion_window": "24h"})
    return {"status": batch.status_code, "seconds": round(time.monotonic() - start, 2),
            "failed_lines": batch.json().get("request_counts", {}).get("failed"),
            "memory_growth_mb": server.growth_mb()}


def _stream(total: int, head: bytes = b"", tail: bytes = b"") -> Iterator[bytes]:
    yield head
    block = b"x" * MB
    for _ in range(total // MB):
        yield block
    yield tail


def unauthenticated(server: Server, path: str) -> dict[str, Any]:
    if path == "/v1/files":
        content = _stream(100 * MB, b'--b\r\nContent-Disposition: form-data; name="file"; '
                                    b'filename="a.jsonl"\r\n\r\n')
        headers = {"Content-Type": "multipart/form-data; boundary=b"}
    else:
        content = _stream(100 * MB, b'{"input_file_id": "', b'"}')
        headers = {"Content-Type": "application/json"}
    start = time.monotonic()
    try:
        answer: Any = httpx.post(server.url + path, content=content, headers=headers,
                                 timeout=600).status_code
    except httpx.TransportError as exc:  # the server answered and closed mid-body
        answer = type(exc).__name__
    return {"answer": answer, "seconds": round(time.monotonic() - start, 2),
            "memory_growth_mb": server.growth_mb()}


def healthz_under_metrics(server: Server, clients: int = 100,
                          seconds: float = 10.0) -> dict[str, Any]:
    """100 clients (asyncio tasks, one connection each, so that the load generator's own
    threads do not starve the server of the shared CPUs) scrape /metrics with the admin
    key while /healthz is timed every 0.2 s on a connection of its own."""
    return asyncio.run(_healthz_under_metrics(server, clients, seconds))


async def _healthz_under_metrics(server: Server, clients: int,
                                 seconds: float) -> dict[str, Any]:
    stop = asyncio.Event()
    headers = {"Authorization": f"Bearer {server.key}"}
    scraped = 0

    async def scrape() -> None:
        nonlocal scraped
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            while not stop.is_set():
                with suppress(httpx.TransportError):
                    await client.get(f"{server.url}/metrics", headers=headers)
                    scraped += 1

    tasks = [asyncio.create_task(scrape()) for _ in range(clients)]
    await asyncio.sleep(1)  # the scrapers are at it
    times: list[float] = []
    timeouts = 0
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=10) as probe:
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                await probe.get(f"{server.url}/healthz")
                times.append(time.monotonic() - start)
            except httpx.TransportError:
                timeouts += 1
            await asyncio.sleep(0.2)
    shutdown_s = await asyncio.to_thread(server.stop)  # with the scrapers still at it
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"metrics_answered": scraped, "healthz_answered": len(times),
            "healthz_timeouts_10s": timeouts,
            "healthz_median_s": round(statistics.median(times), 3) if times else None,
            "healthz_max_s": round(max(times), 3) if times else None,
            "sigterm_to_exit_s": shutdown_s}


def measure(root: Path, broker: str, only: str | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, run in (("line_10mb", line_10mb),
                      ("line_3mb", lambda s: line_10mb(s, 3 * MB)),  # under the line limit
                      ("unauthenticated_upload_100mb",
                       lambda s: unauthenticated(s, "/v1/files")),
                      ("unauthenticated_json_100mb",
                       lambda s: unauthenticated(s, "/v1/batches")),
                      ("healthz_under_metrics", healthz_under_metrics)):
        if only and name != only:
            continue
        server = Server(root, broker)
        try:
            results[name] = run(server)
        finally:
            if server.process.poll() is None:
                server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout to compare with")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--only", help="one measurement, e.g. healthz_under_metrics")
    args = parser.parse_args()
    report = {"after": measure(REPO, args.broker, args.only)}
    if args.before:
        report = {"before": measure(args.before.resolve(), args.broker, args.only)} | report
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
