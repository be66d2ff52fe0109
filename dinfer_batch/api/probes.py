"""What the operations endpoints answer from, so that no request thread waits on the
database or the broker: one background thread probes both every PROBE_S seconds (each
probe under its own connect timeout), and the metrics are computed from SQL at most once
per METRICS_TTL_S however many scrapers ask."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import text

from dinfer_batch.redact import mask
from dinfer_batch.storage import db

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

PROBE_S = 2.0
STALE_S = 15.0  # a probe stuck longer than its timeouts allow: not ready either
METRICS_TTL_S = 5.0
log = logging.getLogger("uvicorn.error")


class Readiness:
    """The last probe's verdict: None when ready, else a reason without any URL."""

    def __init__(self, database_url: str, broker: Broker) -> None:
        self.database_url = database_url
        self.broker = broker
        self.reason: str | None = "starting"
        self.checked_at = 0.0
        self._stop = threading.Event()

    def probe(self) -> None:
        reason, why = None, ""
        try:
            with db.db_engine(self.database_url).connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:  # any reason the database cannot answer
            reason, why = "database unreachable", " ".join(str(exc).split())
        else:
            try:
                self.broker.check()
            except ConnectionError as exc:
                reason, why = "broker unreachable", str(exc)
        if reason != self.reason:  # logged once per change, not every probe
            if reason is None:
                log.info("readiness: ready")
            else:
                log.warning("readiness: %s (%s)", reason, mask(why))
        self.reason, self.checked_at = reason, time.monotonic()

    def verdict(self) -> str | None:
        if self.reason is None and time.monotonic() - self.checked_at > STALE_S:
            return "readiness probe stalled"
        return self.reason

    def start(self) -> None:
        """Probe once now, then every PROBE_S in a daemon thread until `stop`."""
        self.probe()
        threading.Thread(target=self._loop, name="readiness", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(PROBE_S):
            self.probe()


class Cached:
    """`compute()`'s value, recomputed at most once per `ttl` seconds; concurrent callers
    of a stale value wait for the one computing it instead of computing it again."""

    def __init__(self, compute: Callable[[], bytes], ttl: float = METRICS_TTL_S) -> None:
        self.compute, self.ttl = compute, ttl
        self._lock = threading.Lock()
        self._value: bytes | None = None
        self._at = 0.0

    def fresh(self) -> bytes | None:
        """The value if it is younger than `ttl`, without waiting for anything."""
        value, at = self._value, self._at
        return value if value is not None and time.monotonic() - at <= self.ttl else None

    def get(self) -> bytes:
        with self._lock:
            if self._value is None or time.monotonic() - self._at > self.ttl:
                self._value, self._at = self.compute(), time.monotonic()
            return self._value
