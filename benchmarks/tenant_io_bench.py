"""What one tenant's uploads and reads cost the API server (#35), for this tree and, with
`--baseline REF` (default main), that commit, in one run (the baseline from `git
archive`): mallory makes a batch of a few-KB dictionary-encoded zstd Parquet file of
ROWS rows x CHARS characters while alice lists her batches in a loop; then, on an ended
batch whose output is large (OUTPUT_ROWS lines, each with 16 metadata columns of 500
characters), 8 concurrent `Range: bytes=-10` reads of its output file.

Each tree gets a fresh `dinfer-batch api` (temporary SQLite database and files directory,
the demo model, a throwaway queue on the local Redis) and one worker with the instant
stand-in engine. Prints one JSON object: per tree, the API's peak RSS while the Parquet
batch was made (its VmHWM reset first) and that batch's status and seconds, alice's
listing latency idle and during it, and the suffix reads' seconds and the API's RSS
growth.

    python benchmarks/tenant_io_bench.py --rows 3000 --chars 150000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pyarrow as pa
import pyarrow.parquet as pq
from baseline import unpack
from tenant_bench import REPO, Server  # same folder

MB = 1 << 20


def rss(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")


def reset_peak(pid: int) -> int:
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss(pid, "VmRSS")


def latencies(client: Any, stop: threading.Event | None, count: int = 10) -> list[float]:
    seconds: list[float] = []
    while (stop is None and len(seconds) < count) or (stop is not None and not stop.is_set()):
        started = time.perf_counter()
        client.get("/v1/batches", params={"limit": 20})
        seconds.append(time.perf_counter() - started)
        time.sleep(0.05)
    return seconds


def create(client: Any, file_id: str, endpoint: str) -> Any:
    return client.post("/v1/batches", json={"input_file_id": file_id, "endpoint": endpoint,
                                            "completion_window": "24h"})


def wait_ended(client: Any, batch_id: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.get(f"/v1/batches/{batch_id}").json()
        if batch["status"] in ("completed", "failed", "cancelled", "expired"):
            return batch
        time.sleep(0.5)
    raise RuntimeError(f"batch {batch_id} did not end")


def huge_range(client: Any, url: str) -> int | str:
    """The status of a HEAD with a 5,000-digit Range end (main: a 500, then the reset)."""
    try:
        return client.head(url, headers={"Range": "bytes=0-" + "9" * 5000}).status_code
    except httpx.TransportError as exc:
        return f"{type(exc).__name__}: {exc}"


def measure(root: Path, broker: str, hostile: Path, wide: Path) -> dict[str, Any]:
    server = Server(root, broker)
    worker = subprocess.Popen(
        [sys.executable, "-m", "dinfer_batch", "worker"], cwd=root,
        env=server.env | {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = server.process.pid
    try:
        big, table = server.upload("mallory", hostile), server.upload("alice", wide)
        result: dict[str, Any] = {}
        with server.client("alice") as alice, server.client("mallory") as mallory:
            idle = latencies(alice, None)
            before = reset_peak(pid)
            stop, during = threading.Event(), []
            reader = threading.Thread(target=lambda: during.extend(latencies(alice, stop)))
            reader.start()
            started = time.perf_counter()
            made = create(mallory, big, "/v1/chat/completions")
            result["parquet_batch_s"] = round(time.perf_counter() - started, 2)
            stop.set()
            reader.join()
            result |= {"parquet_batch_status": made.status_code,
                       "api_rss_before_mb": round(before / MB),
                       "api_peak_rss_mb": round(rss(pid, "VmHWM") / MB),
                       "listing_idle_median_s": round(statistics.median(idle), 3),
                       "listing_during_median_s": round(statistics.median(during or [0]), 3),
                       "listing_during_max_s": round(max(during or [0]), 3)}

            batch = create(alice, table, "/v1/completions").json()
            batch = wait_ended(alice, batch["id"])
            url = f"/v1/files/{batch['output_file_id']}/content"
            size = len(alice.get(url).content)  # the pages' index is made here
            before = reset_peak(pid)
            started = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                tails = list(pool.map(lambda _: alice.get(url, headers={"Range": "bytes=-10"}),
                                      range(8)))
            result |= {"output_mb": round(size / MB, 1),
                       "suffix_reads_s": round(time.perf_counter() - started, 2),
                       "suffix_reads_ok": all(t.status_code == 206 for t in tails),
                       "suffix_reads_rss_growth_mb": round((rss(pid, "VmHWM") - before) / MB),
                       "if_none_match_status": alice.get(url, headers={
                           "If-None-Match": tails[0].headers["etag"]}).status_code}
            result["huge_range_status"] = huge_range(alice, url)  # last: main resets
    finally:
        worker.terminate()
        worker.wait(30)
        server.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3000, help="rows of the hostile file")
    parser.add_argument("--chars", type=int, default=150_000, help="characters of its value")
    parser.add_argument("--output-rows", type=int, default=5000,
                        help="lines of the batch whose output is read by suffix")
    parser.add_argument("--baseline", default="main", help="git ref to compare with ('' for none)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenant-io-bench-") as tmp:
        hostile, wide = Path(tmp) / "hostile.parquet", Path(tmp) / "wide.parquet"
        text = "ab" * (args.chars // 2)
        pq.write_table(pa.table({"messages": [[{"role": "user", "content": text}]] * args.rows}),
                       hostile, compression="zstd")
        rows = args.output_rows
        pq.write_table(pa.table({"prompt": [f"add {i} 1=" for i in range(rows)], **{
            f"meta_{k}": [f"{k}{i}".ljust(500, "x") for i in range(rows)] for k in range(16)}}),
            wide)
        result: dict[str, Any] = {"rows": args.rows, "chars": args.chars,
                                  "file_bytes": hostile.stat().st_size,
                                  "decoded_mb": round(args.rows * args.chars / MB)}
        if args.baseline:
            baseline = unpack(args.baseline, Path(tmp) / "baseline")
            result["baseline"] = {"ref": args.baseline,
                                  **measure(baseline, args.broker, hostile, wide)}
        result["this"] = measure(REPO, args.broker, hostile, wide)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
