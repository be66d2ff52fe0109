"""The engines a worker process loads, as the service's settings say: read once at the
process's entry (a replica, `dinfer-batch run`) and handed to workers.engine_cache as
plain values (docs/adr/031-one-settings-object.md)."""

from __future__ import annotations

from dinfer_batch.config import (
    constraint_cache_mb,
    engine_factory,
    kernels,
    prefix_cache_bytes,
)
from engine.constraints.compiled import MB
from workers.engine_cache import CompileLimits, EngineOptions, configure


def configure_engines(tensor_parallel: int) -> None:
    """Every engine this process loads from now on: `tensor_parallel` ranks (the worker's
    --tensor-parallel), and the settings' prefix cache, kernels, engine factory and
    constraint limits; UserError naming a bad setting."""
    configure(EngineOptions(
        tensor_parallel=tensor_parallel, prefix_cache_bytes=prefix_cache_bytes(),
        kernels=kernels(), factory=engine_factory(),
        constraint_limits=CompileLimits(constraint_cache_mb() * MB)))
