"""A watchdog for engine calls. A call that runs longer than the chunk timeout has hung
(a stuck kernel, a deadlocked collective); a hung thread cannot be stopped from inside
Python, so the worker hands its chunk back to the queue and replaces itself with a fresh
process running the same command (os.execv: same pid, fresh memory and device state)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def watching(seconds: float, on_expire: Callable[[], None]) -> Iterator[None]:
    """Call `on_expire` from another thread if the block is still running after `seconds`."""
    timer = threading.Timer(seconds, on_expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def recycle(argv: list[str]) -> None:
    """Replace this process with `argv` (a fresh worker); never returns."""
    log.error("recycling the worker: %s", " ".join(argv))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(argv[0], argv)
