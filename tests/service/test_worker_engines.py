"""A worker's engines: the process's settings become one EngineCache at its entry
(dinfer_batch/jobs/running/engine_options.py), which the entry hands down; no module state
holds them (docs/adr/051-settings-handed-down.md)."""

from __future__ import annotations

import os
from dataclasses import replace

from dinfer_batch.config import Settings
from dinfer_batch.jobs.running.engine_options import configure_engines
from dinfer_workers.engine_cache import EngineCache, EngineOptions

LOADED: list[Recorded] = []


class Recorded:
    """A stand-in engine that records its loads and closes."""

    def __init__(self, model: str, device: str) -> None:
        self.model, self.device, self.closed = model, device, False
        LOADED.append(self)

    def close(self) -> None:
        self.closed = True


def test_the_settings_become_the_cache_the_entry_hands_down() -> None:
    config = replace(Settings.from_env(os.environ), prefix_cache_bytes=1 << 20,
                     kernels="torch", engine_factory="tests.stand_in_engines:InstantEngine")
    options = configure_engines(2, config).options
    assert (options.tensor_parallel, options.prefix_cache_bytes, options.kernels,
            options.factory) == (2, 1 << 20, "torch", "tests.stand_in_engines:InstantEngine")
    assert configure_engines(1, config) is not configure_engines(1, config)  # no global


def test_one_engine_is_held_per_cache() -> None:
    LOADED.clear()
    cache = EngineCache(EngineOptions(factory=f"{__name__}:Recorded"))
    first = cache("a", "cpu")
    assert cache("a", "cpu") is first and len(LOADED) == 1  # kept for the next chunk
    second = cache("b", "cpu")  # another model: the first closes before it loads
    assert first.closed and not second.closed and [e.model for e in LOADED] == ["a", "b"]
    other = EngineCache(EngineOptions(factory=f"{__name__}:Recorded"))
    assert other("b", "cpu") is not second  # each cache its own
