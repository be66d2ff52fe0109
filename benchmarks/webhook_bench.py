"""Webhook isolation figures, on a baseline commit and on this tree in one run, printed
as JSON: how long a good owner's event waits for its delivery while a bad owner's three
endpoints answer one byte every 2 seconds (an answer of 38 bytes: 76 s), with 12 of the
bad owner's events due before it. Also: how many of the trickled answers were recorded
as `delivered`, and the most connections the bad receiver had open at once.

Each tree runs `Sender(...).start()` with its own code (PYTHONPATH) in a child process,
on SQLite, with the default DINFER_BATCH_WEBHOOK_TIMEOUT (10 s); a good delivery not
made within `--cap` seconds is reported as not made.

    python benchmarks/webhook_bench.py                    # baseline: main
    python benchmarks/webhook_bench.py --cap 60 --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from baseline import make_job_spec, unpack  # same folder

REPO = Path(__file__).resolve().parents[1]
TRICKLE_S = 2.0
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
BAD_ENDPOINTS, BAD_EVENTS = 3, 4  # 12 deliveries, due before the good one


class Trickle(socketserver.BaseRequestHandler):
    open_now = most_open = 0
    lock = threading.Lock()

    def handle(self) -> None:
        with Trickle.lock:
            Trickle.open_now += 1
            Trickle.most_open = max(Trickle.most_open, Trickle.open_now)
        try:
            self.request.recv(65536)
            for byte in ANSWER:
                time.sleep(TRICKLE_S)
                self.request.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            with Trickle.lock:
                Trickle.open_now -= 1


class Quick(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def serve(server: socketserver.BaseServer) -> int:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])  # type: ignore[index]


def child(cap: float) -> None:
    from sqlalchemy import select

    from dinfer_batch.config import Settings
    from dinfer_batch.jobs.intake.ingest import ingest
    from dinfer_batch.storage import db
    from dinfer_batch.storage.tables import WebhookDelivery
    from dinfer_batch.webhooks.endpoints import add_endpoint
    from dinfer_batch.webhooks.sender import Sender

    slow = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Trickle)
    slow.daemon_threads = True
    quick = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quick)
    slow_port, quick_port = serve(slow), serve(quick)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/hooks.db"
        db.upgrade(url)
        sessions = db.ready(url)
        for n in range(BAD_ENDPOINTS):
            add_endpoint(sessions, f"http://127.0.0.1:{slow_port}/h{n}", ["batch.failed"],
                         owner="mallory")
        good = add_endpoint(sessions, f"http://127.0.0.1:{quick_port}/h", ["batch.failed"],
                            owner="alice")
        bad_file = Path(tmp) / "bad.jsonl"
        bad_file.write_text("not json\n")  # a job that fails at once: one event
        config = Settings.from_env(os.environ)  # this script is its process's entry

        def failed_job(owner: str) -> None:
            spec = make_job_spec(config.default_model, {}, config.model_dir, queue="q",
                                 chunk_size=8, owner=owner)
            ingest(sessions, bad_file, spec, config)

        for _ in range(BAD_EVENTS):
            failed_job("mallory")
        failed_job("alice")
        stop = threading.Event()
        started = time.monotonic()
        Sender(sessions, config.webhook_timeout, config.webhook_retry_seconds).start(stop)
        delay = None
        while time.monotonic() - started < cap:
            with sessions() as session:
                statuses = {endpoint: status for endpoint, status in session.execute(
                    select(WebhookDelivery.endpoint_id, WebhookDelivery.status))}
            if statuses.get(good.id) == "delivered":
                delay = round(time.monotonic() - started, 2)
                break
            time.sleep(0.1)
        stop.set()
        with sessions() as session:
            bad_delivered = session.scalar(select(WebhookDelivery.id).where(
                WebhookDelivery.endpoint_id != good.id,
                WebhookDelivery.status == "delivered").limit(1)) is not None
        print(json.dumps({"good_delivery_seconds": delay, "cap_seconds": cap,
                          "bad_answer_seconds": len(ANSWER) * TRICKLE_S,
                          "a_trickled_answer_recorded_delivered": bad_delivered,
                          "bad_receiver_most_open": Trickle.most_open}))
        os._exit(0)  # the sender's threads may still be reading a trickle


def run_tree(tree: Path, cap: float) -> dict[str, Any]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", "--cap", str(cap)], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="git ref to compare with")
    parser.add_argument("--cap", type=float, default=150.0,
                        help="seconds to wait for the good owner's delivery")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.cap)
        return
    with tempfile.TemporaryDirectory() as tmp:
        baseline = unpack(args.baseline, Path(tmp) / "baseline")
        before = run_tree(baseline, args.cap)
    after = run_tree(REPO, args.cap)
    print(json.dumps({"baseline": {"ref": args.baseline, **before}, "this_tree": after},
                     indent=2))


if __name__ == "__main__":
    main()
