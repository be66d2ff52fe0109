"""Pause Python's cyclic garbage collector around a bulk pass over a million rows."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Reading or writing a big job allocates millions of small dicts and no reference
    cycles (reference counting frees every page); the cyclic collector would rescan the
    live pages over and over, a quarter of the time, so it pauses until the pass is done."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
