"""A real `dinfer-batch beat` process for a test's service, and a local webhook receiver
(a tiny HTTP server on a thread) that answers with the statuses it is given."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.service_helpers import Service, wait_for


def start_beat(service: Service, log: Path, *args: str, **extra_env: str) -> subprocess.Popen:
    """`dinfer-batch beat ARGS` (stopped with the service's workers); returns once it runs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dinfer_batch", "beat", "--interval", "0.2", *args],
        env=os.environ | service.env | extra_env, stdout=log.open("w"),
        stderr=subprocess.STDOUT)
    service.workers.append(process)
    wait_for(lambda: "reading schedules" in log.read_text() or process.poll() is not None, 60)
    assert process.poll() is None, log.read_text()
    return process


@dataclass
class Receiver:
    """What the server got: (body, headers) per request, in order."""

    url: str
    answers: list[int]  # statuses to answer, in turn; 200 once they run out
    delays: list[float]  # seconds to wait before answering, in turn; none once they run out
    got: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)


@contextmanager
def receiver(*answers: int, delays: tuple[float, ...] = ()) -> Iterator[Receiver]:
    received = Receiver("", list(answers), list(delays))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.got.append((body, dict(self.headers.items())))
            if received.delays:
                time.sleep(received.delays.pop(0))
            self.send_response(received.answers.pop(0) if received.answers else 200)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_port}/hooks"
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
