"""What one tenant's worst-case ingest costs another on SQLite (#26): while owner mallory
makes a batch of a file of LINES invalid `{}` lines (the cheapest lines to store, so the
most rows per byte: 4.5 M of them were one 82 s transaction in the issue), owner alice
lists her batches (`GET /v1/batches`) in a loop and makes one small batch of her own;
for this tree and, with `--baseline REF` (default main), that commit of the project, in
one run, side by side (the baseline from `git archive`).

Each tree gets a fresh `dinfer-batch api` (temporary SQLite database and files directory,
the demo model, a throwaway queue on the local Redis), keys of its own for both owners,
and DINFER_BATCH_MAX_BATCH_REQUESTS lifted so the lines cap does not refuse the file (the
ingest itself is measured). Prints one JSON object: the ingest's seconds, and alice's
listing latencies (median, 95th percentile, max), failures (any status but 200) and
small-batch seconds during it.

    python benchmarks/tenant_bench.py --lines 200000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2 as httpx
from api_server import create_key, start_api  # same folder
from baseline import unpack

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300.0


class Server:
    """A `dinfer-batch api` of the tree at `root`, with keys for mallory and alice."""

    def __init__(self, root: Path, broker: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="tenant-"))
        self.env = os.environ | {
            "DINFER_BATCH_DATABASE_URL": f"sqlite:///{self.work / 'db.sqlite'}",
            "DINFER_BATCH_FILES_DIR": str(self.work / "files"),
            "DINFER_BATCH_MODEL": str(root / "dinfer_models" / "demo"),
            "DINFER_BATCH_QUEUE": f"bench_{uuid.uuid4().hex[:8]}",
            "DINFER_BATCH_BROKER_URL": broker, "DINFER_BATCH_MAX_BATCH_REQUESTS": "1000000000",
            "DINFER_BATCH_MAX_FILE_BYTES": str(1 << 30), "PYTHONPATH": str(root)}
        self.keys = {owner: create_key(root, self.env, owner) for owner in ("mallory", "alice")}
        self.process, self.url = start_api(root, self.env)

    def client(self, owner: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=TIMEOUT_S,
                            headers={"Authorization": f"Bearer {self.keys[owner]}"})

    def upload(self, owner: str, path: Path) -> str:
        with self.client(owner) as client, path.open("rb") as handle:
            answer = client.post("/v1/files", files={"file": (path.name, handle)},
                                 data={"purpose": "batch"})
        answer.raise_for_status()
        return answer.json()["id"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def create(client: httpx.Client, file_id: str) -> httpx.Response:
    return client.post("/v1/batches", json={"input_file_id": file_id,
                                            "endpoint": "/v1/completions",
                                            "completion_window": "24h"})


def measure(root: Path, broker: str, hostile: Path, small: Path) -> dict[str, Any]:
    server = Server(root, broker)
    try:
        big, mine = server.upload("mallory", hostile), server.upload("alice", small)
        with server.client("alice") as alice:
            assert create(alice, mine).status_code == 200  # something to list
        ingest: dict[str, Any] = {}

        def mallory() -> None:
            started = time.perf_counter()
            with server.client("mallory") as client:
                ingest["status"] = create(client, big).status_code
            ingest["seconds"] = round(time.perf_counter() - started, 2)

        thread = threading.Thread(target=mallory)
        thread.start()
        latencies, failures, small_s = [], 0, None
        with server.client("alice") as alice:
            time.sleep(0.5)  # the ingest under way
            while thread.is_alive():
                started = time.perf_counter()
                try:
                    ok = alice.get("/v1/batches", params={"limit": 20}).status_code == 200
                except httpx.TransportError:
                    ok = False
                latencies.append(time.perf_counter() - started)
                failures += not ok
                if small_s is None and len(latencies) >= 3:
                    started = time.perf_counter()
                    failures += create(alice, mine).status_code != 200
                    small_s = round(time.perf_counter() - started, 3)
                time.sleep(0.05)
        thread.join()
    finally:
        server.stop()
    ordered = sorted(latencies) or [0.0]
    return {"ingest_seconds": ingest.get("seconds"), "ingest_status": ingest.get("status"),
            "listings": len(latencies), "listing_median_s": round(statistics.median(ordered), 3),
            "listing_p95_s": round(ordered[math.ceil(0.95 * len(ordered)) - 1], 3),
            "listing_max_s": round(ordered[-1], 3), "alice_failures": failures,
            "alice_small_batch_s": small_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000, help="lines of the hostile file")
    parser.add_argument("--baseline", default="main", help="git ref to compare with ('' for none)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenant-bench-") as tmp:
        hostile, small = Path(tmp) / "hostile.jsonl", Path(tmp) / "small.jsonl"
        hostile.write_text("{}\n" * args.lines)
        small.write_text("".join(json.dumps({
            "custom_id": f"a{i}", "method": "POST", "url": "/v1/completions",
            "body": {"prompt": f"a {i}", "max_tokens": 8}}) + "\n" for i in range(3)))
        result: dict[str, Any] = {"lines": args.lines, "file_mb": round(
            hostile.stat().st_size / (1 << 20), 1)}
        if args.baseline:
            baseline = unpack(args.baseline, Path(tmp) / "baseline")
            result["baseline"] = {"ref": args.baseline,
                                  **measure(baseline, args.broker, hostile, small)}
        result["this"] = measure(REPO, args.broker, hostile, small)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
