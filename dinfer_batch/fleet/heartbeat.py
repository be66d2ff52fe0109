"""A worker's heartbeat: a daemon thread writes the worker's row every few seconds.
Failures (the database away) are logged and retried at the next heartbeat. The reaper runs on
a thread of its own, so a broker that hangs never delays a heartbeat."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.storage import registry
from dinfer_batch.storage.registry import WorkerState

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, sessions: sessionmaker[Session], worker_id: str, state: WorkerState,
                 interval: float) -> None:
        self.sessions, self.worker_id, self.state = sessions, worker_id, state
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dinfer-heartbeat",
                                        daemon=True)

    def start(self) -> None:
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

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                registry.write_heartbeat(self.sessions, self.worker_id, self.state)
            except Exception as exc:
                log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
