"""A worker's heartbeat: a daemon thread looks at the worker's state every few seconds
and writes its row when the state changed (a chunk started or ended) or when its last
write is a third of the worker timeout old, so an idle worker writes about once every
20 s (the default 60 s timeout), not every 5 s, and is still live with two writes to
spare (docs/adr/057-fleet-work-once.md). Each write also asks for the reaper's lease
while another process holds it, so asking costs no transaction of its own. Failures (the
database away) are logged and retried at the next look. The reaper runs on a thread of
its own, so a broker that hangs never delays a heartbeat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.storage import registry
from dinfer_batch.storage.registry import WorkerState

log = logging.getLogger(__name__)
REFRESHES_PER_TIMEOUT = 3  # an unchanged worker writes this many times per worker timeout


def refresh_seconds(interval: float, worker_timeout: float) -> float:
    """How long an unchanged worker goes between two writes: a third of the worker
    timeout, and never less than the heartbeat's `interval`."""
    return max(interval, worker_timeout / REFRESHES_PER_TIMEOUT)


class Heartbeat:
    def __init__(self, sessions: sessionmaker[Session], worker_id: str, state: WorkerState,
                 interval: float, worker_timeout: float,
                 also: Callable[[Session], None] | None = None) -> None:
        """`interval`: DINFER_BATCH_HEARTBEAT, how often the state is looked at;
        `worker_timeout`: DINFER_BATCH_WORKER_TIMEOUT, after which a silent worker is
        dead (registry.state_of); `also`: what each write does in its transaction too
        (asks for the reaper's lease: fleet/reaper.py's `Tenure.ask_in`)."""
        self.sessions, self.worker_id, self.state = sessions, worker_id, state
        self.also = also
        self.interval = interval
        self.refresh = refresh_seconds(interval, worker_timeout)
        self._written: tuple[object, ...] | None = None  # the state last written
        self._written_at = time.monotonic()  # registering wrote the row
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dinfer-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self._written = self.state.shown()
        self._thread.start()

    def stop(self) -> None:
        """Stop the heartbeats; the last one marks the worker stopped (a clean exit, not a
        death) and keeps its figures."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        try:
            registry.write_heartbeat(self.sessions, self.worker_id, self.state, stopped=True)
        except Exception as exc:
            log.warning("cannot mark worker %s stopped: %s", self.worker_id, exc)

    def beat(self) -> bool:
        """Write the row if the state changed or the last write is `refresh` old; whether
        it wrote."""
        shown = self.state.shown()
        if shown == self._written and time.monotonic() - self._written_at < self.refresh:
            return False
        registry.write_heartbeat(self.sessions, self.worker_id, self.state, also=self.also)
        self._written, self._written_at = shown, time.monotonic()
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception as exc:
                log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
