"""One webhook POST under a total deadline: connecting, sending, and reading the whole
answer (status line, headers and body) must all end within it. A socket timeout alone
bounds each read, so a receiver that trickles a byte a second would hold a sender for
ever and, answering `200` at last, count as delivered; here a timer shuts the socket
down at the deadline, and an answer not read to its end by then is a failed attempt."""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
from contextlib import suppress
from urllib.parse import unquote, urlsplit

from dinfer_batch.redact import mask


def post(url: str, body: bytes, headers: dict[str, str],
         deadline_s: float) -> tuple[int | None, str | None]:
    """(HTTP status, None) when the whole answer came within `deadline_s` seconds, or
    (status or None, what went wrong). Redirects are not followed (a 3xx is an answer)."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    headers = {name.title(): value for name, value in headers.items()} | {  # as urllib did
        "Content-Type": "application/json", "Connection": "close",
        "User-Agent": "dinfer-batch-webhooks"}
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    status: int | None = None
    started = time.monotonic()
    try:
        connection = kind(parts.hostname or "", parts.port or (443 if https else 80),
                          timeout=deadline_s)
    except ValueError as exc:  # a port out of range
        return None, f"{type(exc).__name__}: {mask(str(exc))}"
    cut = _Cut(connection)
    timer = threading.Timer(deadline_s, cut)
    timer.start()
    try:
        connection.connect()
        if cut.done:  # the deadline passed while connecting
            raise TimeoutError
        connection.sock.settimeout(max(deadline_s - (time.monotonic() - started), 0.001))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        status = response.status
        response.read()  # to its end: an answer cut short is no answer
        if cut.done:
            raise TimeoutError
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if cut.done or isinstance(exc, TimeoutError | socket.timeout):
            return status, (f"timed out: no complete answer within {deadline_s:g} s "
                            "(DINFER_BATCH_WEBHOOK_TIMEOUT)")
        reason = getattr(exc, "reason", None) or exc
        return status, f"{type(reason).__name__}: {mask(str(reason))}"
    finally:
        timer.cancel()
        connection.close()
    if not 200 <= status < 300:
        return status, f"HTTP {status}"
    return status, None


class _Cut:
    """Called by the deadline's timer: shuts the connection's socket down, which ends any
    read or write blocked on it at once (also TLS's, on the socket below)."""

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection = connection
        self.done = False

    def __call__(self) -> None:
        self.done = True
        sock = self.connection.sock
        if sock is not None:
            with suppress(OSError):  # (ssl.SSLError is an OSError)
                sock.shutdown(socket.SHUT_RDWR)
