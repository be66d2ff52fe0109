"""One engine per worker process, loaded on the first chunk that needs it (after any
fork, never before) and kept for every later chunk of the same model.

`DINFER_BATCH_ENGINE=module:factory` replaces the engine with `factory(model, device)`,
an object with the same `generate` and `tokenizer` (a WorkerEngine); benchmarks use it to
measure the service without the model's cost.

Engines loaded here compile constraints within the limits of `set_constraint_limits`
(the service's settings: bytes of grammars kept).

A replica of N tensor-parallel ranks (`set_tensor_parallel(N)`, from the worker's
--tensor-parallel) loads engines whose ranks 1..N-1 are child processes of this one;
a rank that dies raises RankFailure, and the replica restarts as a whole. Engines keep
a prompt prefix cache of `set_prefix_cache_bytes(N)` bytes (the service's
DINFER_BATCH_PREFIX_CACHE_MB), which lives and dies with the engine."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from engine.constraints.compiled import CompileLimits
from engine.constraints.spec import ConstraintSpec
from engine.generation_config import GenerationConfig, ResolvedConfig
from engine.infill import Prompt
from engine.ranks.failure import RankFailure
from engine.result import GenerationResult

__all__ = ["CompileLimits", "Prompt", "RankFailure", "WorkerEngine", "generation_config",
           "get_engine", "rank_devices", "resolve_config", "set_constraint_limits",
           "set_prefix_cache_bytes", "set_tensor_parallel"]


@runtime_checkable
class WorkerEngine(Protocol):
    """What a worker needs from an engine: `engine.Engine`, or a stand-in
    (tests/stand_in_engines.py)."""

    @property
    def tokenizer(self) -> Any: ...

    def generate(self, prompts: Sequence[Prompt], config: GenerationConfig | None = None,
                 on_result: Callable[[int, GenerationResult], None] | None = None,
                 seeds: Sequence[int | None] | None = None,
                 constraints: Sequence[ConstraintSpec | None] | None = None
                 ) -> list[GenerationResult]: ...

    def constraint_error(self, spec: ConstraintSpec) -> str | None:
        """Why the constraint cannot be compiled, or None; compiled once per engine, its
        failure remembered as its grammar is (engine.Engine.constraint_error)."""
        ...


EngineFactory = Callable[[str, str], WorkerEngine]
_loaded: dict[tuple[str, str, int, int], WorkerEngine] = {}
_tensor_parallel = [1]
_constraint_limits = [CompileLimits()]
_prefix_cache_bytes = [0]


def set_tensor_parallel(ranks: int) -> None:
    """The number of ranks of every engine this process loads from now on."""
    _tensor_parallel[0] = ranks


def set_constraint_limits(limits: CompileLimits) -> None:
    """The constraint limits of every engine this process loads from now on."""
    _constraint_limits[0] = limits


def set_prefix_cache_bytes(budget: int) -> None:
    """The prefix cache budget of every engine this process loads from now on."""
    _prefix_cache_bytes[0] = budget


def rank_devices(device: str, ranks: int) -> list[str]:
    """Each rank's device as this process names it: `cuda:N` and the next GPUs, or cpu."""
    if ranks == 1 or not device.startswith("cuda"):
        return [device] * ranks
    first = int(device.partition(":")[2] or 0)
    return [f"cuda:{first + rank}" for rank in range(ranks)]


def get_engine(model: str, device: str) -> WorkerEngine:
    key = (model, device, _tensor_parallel[0], _prefix_cache_bytes[0])
    if key not in _loaded:
        for engine in _loaded.values():  # a tensor-parallel engine's ranks end with it
            getattr(engine, "close", lambda: None)()
        _loaded.clear()
        _loaded[key] = _factory()(model, device)
    return _loaded[key]


def _factory() -> EngineFactory:
    spec = os.environ.get("DINFER_BATCH_ENGINE")
    if not spec:
        from engine.engine import Engine

        def load(model: str, device: str) -> WorkerEngine:
            engine = Engine.from_pretrained(model, device=device,
                                            tensor_parallel=_tensor_parallel[0],
                                            prefix_cache_bytes=_prefix_cache_bytes[0])
            engine.constraints.limits = _constraint_limits[0]
            return engine

        return load
    module, _, name = spec.partition(":")
    factory: EngineFactory = getattr(importlib.import_module(module), name)
    return factory


def generation_config(fields: dict[str, Any]) -> GenerationConfig:
    """The engine's GenerationConfig; it raises ValueError for invalid values."""
    return GenerationConfig(**fields)


def resolve_config(fields: dict[str, Any], model_defaults: dict[str, Any],
                   uniform_noise: bool = False) -> ResolvedConfig:
    """The config as the engine would complete it from a model's generation_config.json
    (uniform_noise: for DiffusionGemma's family); ValueError when the values are invalid."""
    return generation_config(fields).resolve(model_defaults, uniform_noise)
