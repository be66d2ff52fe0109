"""A function mapped over a stream in forked processes, results in order, memory bounded."""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

_function: Callable[[Any], Any] | None = None  # in a pool's process: what it maps


def cpus() -> int:
    """The CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def forkable(wanted: int) -> int:
    """`wanted` processes, or 0 where forking is unsafe: while other threads run here (a
    forked child has only the forking thread, and a lock another thread held stays locked
    in it for ever: the API server, a worker's heartbeat), and off Linux (macOS's system
    libraries are not fork-safe)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 0
    return max(0, wanted)


def ordered_map(function: Callable[[In], Out], items: Iterable[In],
                processes: int) -> Generator[Out, None, None]:
    """`map(function, items)` with `processes` forked processes (0: in this one; see
    `forkable`). The function travels by fork, not pickle, so it may hold what pickling
    would copy or refuse (a tokenizer, a closure); items and results are pickled. At most
    two items per process are in flight, so a long stream stays in bounded memory. The
    processes fork at the first item (start threads after it) and end when the iterator
    is exhausted or closed: a caller that may stop early closes it (`closing`), or its
    processes live until the iterator is collected."""
    if processes == 0:
        yield from map(function, items)
        return
    pool = ProcessPoolExecutor(processes, mp_context=get_context("fork"),
                               initializer=_install, initargs=(function,))
    try:
        pending: deque[Future[Out]] = deque()
        for item in items:
            pending.append(pool.submit(_call, item))
            if len(pending) > 2 * processes:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(cancel_futures=True)


def _install(function: Callable[[Any], Any]) -> None:
    global _function
    _function = function


def _call(item: Any) -> Any:
    assert _function is not None, "ordered_map's pool runs only what it installed"
    return _function(item)
