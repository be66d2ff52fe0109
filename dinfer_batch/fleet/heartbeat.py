"""The background thread of every worker process: a heartbeat every few seconds, and a
reaper pass every other beat (starting at a random beat, so a fleet's reapers spread
out). Failures (the database away) are logged and retried at the next beat."""

from __future__ import annotations

import logging
import random
import threading

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.fleet import registry
from dinfer_batch.fleet.reaper import Reaper
from dinfer_batch.fleet.registry import WorkerState

log = logging.getLogger(__name__)
REAP_EVERY = 2  # beats


class Heartbeat:
    def __init__(self, sessions: sessionmaker[Session], worker_id: str, state: WorkerState,
                 reaper: Reaper, interval: float) -> None:
        self.sessions, self.worker_id, self.state = sessions, worker_id, state
        self.reaper, self.interval = reaper, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dinfer-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and mark the worker stopped (a clean exit, not a death)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        try:
            registry.beat(self.sessions, self.worker_id, self.state, stopped=True)
        except Exception as exc:
            log.warning("cannot mark worker %s stopped: %s", self.worker_id, exc)

    def _loop(self) -> None:
        beats = random.randrange(REAP_EVERY)
        while not self._stop.wait(self.interval):
            try:
                registry.beat(self.sessions, self.worker_id, self.state)
            except Exception as exc:
                log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
            beats += 1
            if beats % REAP_EVERY == 0:
                self.reaper.run_once()
