"""The engines a worker process loads, as the service's settings say: the settings read
at the process's entry (a replica, `dinfer-batch run`) become the EngineCache that entry
hands its runner, as plain values (docs/adr/031-one-settings-object.md)."""

from __future__ import annotations

from dinfer_batch.config import Settings
from dinfer_engine.constraints.compiled import MB
from dinfer_workers.engine_cache import CompileLimits, EngineCache, EngineOptions


def configure_engines(tensor_parallel: int, config: Settings) -> EngineCache:
    """The engines this process loads: `tensor_parallel` ranks (the worker's
    --tensor-parallel), and the process's settings' prefix cache, kernels, engine factory
    and constraint limits (compiled grammars' bytes, constrained rows' memory)."""
    return EngineCache(EngineOptions(
        tensor_parallel=tensor_parallel, prefix_cache_bytes=config.prefix_cache_bytes,
        kernels=config.kernels, factory=config.engine_factory,
        constraint_limits=CompileLimits(config.constraint_cache_mb * MB),
        constraint_memory_mb=config.constraint_memory_mb))
