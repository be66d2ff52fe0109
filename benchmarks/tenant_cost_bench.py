"""Cost multipliers (#35): owner mallory's batch of lines that each ask for many forwards
without asking for many samples (an infill length search over 16 candidates, the editing
decoder with one-token blocks and many post-steps), and owner alice's small batch of
plain lines made just after it; for this tree and, with `--baseline REF` (default main),
that commit, in one run, side by side (the baseline from `git archive`).

Each tree gets a fresh `dinfer-batch api` and one real worker on the demo model
(temporary SQLite database and files, a throwaway queue on the local Redis). Per tree it
prints: mallory's lines, the generations its batch was counted at (the sum of its
chunks' cost: what quotas and fair share see), its chunks, the forwards it really took
(the output lines' nfe), and how many lines were refused; alice's batch seconds when the
worker is idle and while mallory's batch runs.

    python benchmarks/tenant_cost_bench.py --lines 8
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2 as httpx
from api_server import create_key, start_api  # same folder
from baseline import unpack

REPO = Path(__file__).resolve().parents[1]
ENDED = ("completed", "failed", "expired", "cancelled")
SEARCH = {"suffix": " 4", "infill_lengths": list(range(1, 17))}
EDITING = {"decoder": "editing", "block_length": 1, "max_post_steps": 200,
           "editing_threshold": 0}


def lines(tag: str, count: int, fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/completions",
             "body": {"prompt": f"{i}+{i}=", **fields}} for i in range(count)]


class Tree:
    """A server and a worker of the tree at `root`, with keys for mallory and alice."""

    def __init__(self, root: Path, broker: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="tenant-cost-"))
        self.db = self.work / "db.sqlite"
        self.env = os.environ | {
            "DINFER_BATCH_DATABASE_URL": f"sqlite:///{self.db}",
            "DINFER_BATCH_FILES_DIR": str(self.work / "files"),
            "DINFER_BATCH_MODEL": str(root / "dinfer_models" / "demo"),
            "DINFER_BATCH_QUEUE": f"bench_{uuid.uuid4().hex[:8]}",
            "DINFER_BATCH_BROKER_URL": broker, "PYTHONPATH": str(root)}
        self.keys = {"mallory": create_key(root, self.env, "mallory",
                                           "--max-enqueued-requests", "5000"),
                     "alice": create_key(root, self.env, "alice")}
        self.process, self.url = start_api(root, self.env)
        log = (self.work / "worker.log").open("w")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "dinfer_batch", "worker", "--model",
             self.env["DINFER_BATCH_MODEL"], "--queues", self.env["DINFER_BATCH_QUEUE"]],
            env=self.env, cwd=root, stdout=log, stderr=subprocess.STDOUT)

    def client(self, owner: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=300,
                            headers={"Authorization": f"Bearer {self.keys[owner]}"})

    def submit(self, owner: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        path = self.work / f"{uuid.uuid4().hex}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        with self.client(owner) as client, path.open("rb") as handle:
            uploaded = client.post("/v1/files", files={"file": (path.name, handle)},
                                   data={"purpose": "batch"})
            uploaded.raise_for_status()
            made = client.post("/v1/batches", json={
                "input_file_id": uploaded.json()["id"], "endpoint": "/v1/completions",
                "completion_window": "24h"})
        made.raise_for_status()
        return dict(made.json())

    def wait(self, owner: str, batch_id: str, timeout_s: float = 1800) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.client(owner) as client:
            while time.monotonic() < deadline:
                batch = dict(client.get(f"/v1/batches/{batch_id}").json())
                if batch["status"] in ENDED:
                    return batch
                time.sleep(0.2)
        raise TimeoutError(f"{batch_id} did not end in {timeout_s} s")

    def output(self, owner: str, batch: dict[str, Any]) -> list[dict[str, Any]]:
        if not batch.get("output_file_id"):
            return []
        with self.client(owner) as client:
            text = client.get(f"/v1/files/{batch['output_file_id']}/content").text
        return [json.loads(line) for line in text.splitlines()]

    def chunks(self, batch_id: str) -> list[tuple[int, int]]:
        with sqlite3.connect(self.db) as database:
            return database.execute("SELECT size, COALESCE(cost, size) FROM chunks WHERE "
                                    "job_id = ? ORDER BY chunk_id", (batch_id,)).fetchall()

    def stop(self) -> None:
        for process in (self.worker, self.process):
            process.terminate()
            process.wait(60)


def measure(root: Path, broker: str, count: int) -> dict[str, Any]:
    tree = Tree(root, broker)
    small = lines("a", 3, {"max_tokens": 8})
    try:
        started = time.perf_counter()
        tree.wait("alice", tree.submit("alice", small)["id"], 600)  # the worker is up
        warm_s = time.perf_counter() - started
        started = time.perf_counter()
        tree.wait("alice", tree.submit("alice", small)["id"])
        idle_s = time.perf_counter() - started
        attack_rows = lines("e", count, EDITING) + lines("s", count, SEARCH)
        started = time.perf_counter()
        attack = tree.submit("mallory", attack_rows)
        time.sleep(1.0)  # its first chunk claimed
        victim_started = time.perf_counter()
        tree.wait("alice", tree.submit("alice", small)["id"])
        victim_s = time.perf_counter() - victim_started
        ended = tree.wait("mallory", attack["id"])
        attack_s = time.perf_counter() - started
        output = tree.output("mallory", ended)
        chunks = tree.chunks(attack["id"])
    finally:
        tree.stop()
    bodies = [line["response"]["body"] for line in output if line.get("response")]
    return {
        "attacker": {"lines": len(attack_rows), "refused_lines": attack["request_counts"][
            "failed"], "counted_generations": sum(cost for _, cost in chunks),
            "chunks": len(chunks), "largest_chunk_lines": max(size for size, _ in chunks),
            "nfe": sum(body["metrics"]["nfe"] for body in bodies),
            "metrics_cost": sum(body["metrics"].get("cost", 0) for body in bodies),
            "usage_cost": ended["usage"].get("cost"), "seconds": round(attack_s, 2)},
        "victim": {"first_batch_s": round(warm_s, 2), "idle_s": round(idle_s, 2),
                   "during_attack_s": round(victim_s, 2)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=8,
                        help="mallory's lines of each kind (editing, length search)")
    parser.add_argument("--baseline", default="main", help="git ref to compare with ('' for none)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    result: dict[str, Any] = {"lines_per_kind": args.lines, "search": SEARCH,
                              "editing": EDITING}
    with tempfile.TemporaryDirectory(prefix="tenant-cost-bench-") as tmp:
        if args.baseline:
            baseline = unpack(args.baseline, Path(tmp) / "baseline")
            result["baseline"] = {"ref": args.baseline,
                                  **measure(baseline, args.broker, args.lines)}
        result["this"] = measure(REPO, args.broker, args.lines)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
