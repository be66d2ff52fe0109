"""What one tenant's constraints cost another (#35), for this tree and, with `--baseline
REF` (default main), that commit, in one run, side by side (the baseline from `git
archive`). Each tree gets a fresh `dinfer-batch api` and one `dinfer-batch worker` (the
demo model on CPU, a temporary SQLite database, a throwaway queue on the local Redis:
tenant_bench.py's Server).

- compile: owner mallory's batch of LINES lines with distinct prompts and one regex the
  demo vocabulary cannot spell (`[01]*1[01]{K}é`: a 2^K-state automaton, then failure),
  then owner alice's 2-line batch; alice's latency (create to completed) against the same
  batch on the idle worker, how long mallory's batch held the worker, the failed compiles
  and splits in halves its log shows, and its peak RSS (VmHWM).
- memory: mallory's 2 lines whose spellable regexes compile to 2^K-state automata, the
  workers' DINFER_BATCH_COMPILE_MEMORY_MB set to --compile-mb (trees before #37 honour
  it; since, a grammar's work is bounded by llguidance's limits, ADR 029): how long
  they held the worker, and its peak RSS.
- submit: mallory's batch of SCHEMAS lines, each a distinct small schema (an enum of 200
  values), while alice lists her batches in a loop: mallory's create seconds, alice's
  listing latencies, and the API's peak RSS.

    python benchmarks/tenant_compile_bench.py --lines 8 --repeat 15 --schemas 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from baseline import unpack  # same folder
from tenant_bench import Server

REPO = Path(__file__).resolve().parents[1]
ENDED = ("completed", "failed", "cancelled", "expired")


def line(custom_id: str, prompt: str, **body: Any) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": {"prompt": prompt, "max_tokens": 8, "block_length": 8,
                                "steps": 8, **body}}) + "\n"


class Service(Server):
    """tenant_bench's API server, with one worker."""

    def __init__(self, root: Path, broker: str, compile_mb: int) -> None:
        super().__init__(root, broker)
        # a baseline ignores the setting it does not know
        self.env |= {"OMP_NUM_THREADS": "1", "DINFER_BATCH_COMPILE_MEMORY_MB": str(compile_mb)}
        self.log = self.work / "worker.log"
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "dinfer_batch", "worker", "--model",
             str(root / "dinfer_models" / "demo"), "--queues", self.env["DINFER_BATCH_QUEUE"]],
            env=self.env, cwd=root, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while "ready: " not in self.log.read_text():
            if time.monotonic() > deadline or self.worker.poll() is not None:
                raise RuntimeError(f"the worker of {root} did not start")
            time.sleep(0.2)

    def batch(self, owner: str, text: str) -> str:
        """Upload `text` and create a batch of it: the batch id."""
        with self.client(owner) as client:
            uploaded = client.post("/v1/files", files={"file": ("in.jsonl", text.encode())},
                                   data={"purpose": "batch"})
            uploaded.raise_for_status()
            created = client.post("/v1/batches", json={
                "input_file_id": uploaded.json()["id"], "endpoint": "/v1/completions",
                "completion_window": "24h"})
            created.raise_for_status()
            return str(created.json()["id"])

    def wait(self, owner: str, batch_id: str) -> dict[str, Any]:
        with self.client(owner) as client:
            while True:
                batch: dict[str, Any] = client.get(f"/v1/batches/{batch_id}").json()
                if batch["status"] in ENDED:
                    return batch
                time.sleep(0.1)

    def stop(self) -> None:
        self.worker.terminate()
        self.worker.wait(60)
        super().stop()


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a live process, in MB."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return round(int(row.split()[1]) / 1024, 1)
    return 0.0


def timed_batch(service: Service, owner: str, text: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    batch = service.wait(owner, service.batch(owner, text))
    return round(time.perf_counter() - started, 2), batch


def compile_part(service: Service, lines: int, repeat: int) -> dict[str, Any]:
    victim = "".join(line(f"a{i}", f"alice {i}") for i in range(2))
    idle_s, _ = timed_batch(service, "alice", victim)
    regex = f"[01]*1[01]{{{repeat}}}é"
    attack = "".join(line(f"m{i}", f"mallory {i}", structured_outputs={"regex": regex})
                     for i in range(lines))
    started = time.perf_counter()
    mallory = service.batch("mallory", attack)
    victim_s, _ = timed_batch(service, "alice", victim)
    held = service.wait("mallory", mallory)
    hold_s = round(time.perf_counter() - started, 2)
    text = service.log.read_text()
    return {"victim_idle_s": idle_s, "victim_s": victim_s, "worker_hold_s": hold_s,
            "attack_failed": held["request_counts"]["failed"],
            "failed_compiles_logged": text.count("cannot be compiled, remembered"),
            "splits_logged": text.count("retrying them in halves"),
            "worker_peak_rss_mb": peak_rss_mb(service.worker.pid)}


def memory_part(service: Service, repeat: int) -> dict[str, Any]:
    """Two spellable regexes of 2^K-state automata (the issue's `[01]*1[01]{19}` and
    `[01]*0[01]{19}`, with K = `repeat`)."""
    before = peak_rss_mb(service.worker.pid)
    attack = "".join(line(f"r{bit}", f"bits {bit}", structured_outputs={
        "regex": f"[01]*{bit}[01]{{{repeat}}}"}) for bit in (0, 1))
    started = time.perf_counter()
    held = service.wait("mallory", service.batch("mallory", attack))
    return {"worker_hold_s": round(time.perf_counter() - started, 2),
            "attack_failed": held["request_counts"]["failed"],
            "worker_peak_rss_mb_before": before,
            "worker_peak_rss_mb": peak_rss_mb(service.worker.pid)}


def submit_part(service: Service, schemas: int) -> dict[str, Any]:
    attack = "".join(line(f"s{i}", f"schema {i}", response_format={
        "type": "json_schema", "json_schema": {"name": "e", "schema": {
            "enum": [f"v{i}-{value}" for value in range(200)]}}}) for i in range(schemas))
    created: dict[str, float] = {}

    def mallory() -> None:
        started = time.perf_counter()
        service.batch("mallory", attack)
        created["seconds"] = round(time.perf_counter() - started, 2)

    thread = threading.Thread(target=mallory)
    latencies = []
    with service.client("alice") as alice:
        idle = [_timed(lambda: alice.get("/v1/batches", params={"limit": 20}))
                for _ in range(5)]
        thread.start()
        while thread.is_alive():
            latencies.append(_timed(lambda: alice.get("/v1/batches", params={"limit": 20})))
            time.sleep(0.05)
    thread.join()
    ordered = sorted(latencies) or [0.0]
    return {"create_s": created.get("seconds"), "listing_idle_max_s": round(max(idle), 3),
            "listings": len(latencies), "listing_median_s": round(ordered[len(ordered) // 2], 3),
            "listing_max_s": round(ordered[-1], 3),
            "api_peak_rss_mb": peak_rss_mb(service.process.pid)}


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(root, args.broker, args.compile_mb)
    try:
        return {"compile": compile_part(service, args.lines, args.repeat),
                "memory": memory_part(service, args.memory_repeat),
                "submit": submit_part(service, args.schemas)}
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=8, help="mallory's regex lines")
    parser.add_argument("--repeat", type=int, default=15, help="K in [01]*1[01]{K}é")
    parser.add_argument("--memory-repeat", type=int, default=17,
                        help="K in the memory part's [01]*0[01]{K}, [01]*1[01]{K}")
    parser.add_argument("--compile-mb", type=int, default=128,
                        help="DINFER_BATCH_COMPILE_MEMORY_MB for the workers")
    parser.add_argument("--schemas", type=int, default=200, help="mallory's distinct schemas")
    parser.add_argument("--baseline", default="main", help="git ref to compare with ('' for none)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    result: dict[str, Any] = {"lines": args.lines, "repeat": args.repeat,
                              "memory_repeat": args.memory_repeat,
                              "compile_mb": args.compile_mb, "schemas": args.schemas}
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as tmp:
        if args.baseline:
            baseline = unpack(args.baseline, Path(tmp) / "baseline")
            result["baseline"] = {"ref": args.baseline, **measure(baseline, args)}
        result["this"] = measure(REPO, args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
