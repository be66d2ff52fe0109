"""A real `dinfer-batch beat` process for a test's service, and a local webhook receiver
(a tiny HTTP server on a thread) that answers with the statuses it is given."""

from __future__ import annotations

import http.server
import os
import socketserver
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


@dataclass
class Trickler:
    """A receiver that answers `200` one byte every `every` seconds (its answer would take
    about a minute): how many requests it got, and the most it held open at once."""

    url: str
    requests: int = 0
    open_now: int = 0
    most_open: int = 0


@contextmanager
def trickler(every: float = 0.2, body_only: bool = False) -> Iterator[Trickler]:
    """`body_only`: the status line and headers come at once (a `200`), then the body a
    byte at a time."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n" + b"x" * 300
    lock = threading.Lock()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with lock:
                got.requests += 1
                got.open_now += 1
                got.most_open = max(got.most_open, got.open_now)
            try:
                self.request.recv(65536)
                head = answer.index(b"\r\n\r\n") + 4 if body_only else 0
                self.request.sendall(answer[:head])
                for byte in answer[head:]:
                    time.sleep(every)
                    self.request.sendall(bytes([byte]))
            except OSError:  # the sender hung up: what it should do
                pass
            finally:
                with lock:
                    got.open_now -= 1

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    got = Trickler(f"http://127.0.0.1:{server.server_address[1]}/hooks")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
