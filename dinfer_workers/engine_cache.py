"""One engine per worker process, loaded on the first chunk that needs it (after any
fork, never before) and kept for every later chunk of the same model, as the process's
EngineOptions say: the worker's entry makes its EngineCache from the service's settings
and hands it down (reading the environment is the service's; no module state:
docs/adr/031-one-settings-object.md, docs/adr/051-settings-handed-down.md).

A replica of N tensor-parallel ranks loads engines whose ranks 1..N-1 are child
processes of this one; a rank that dies raises RankFailure, and the replica restarts as a
whole. An engine's prompt prefix cache lives and dies with it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dinfer_engine.constraints.compiled import CompileLimits
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.generation_config import GenerationConfig, ResolvedConfig
from dinfer_engine.infill import Prompt
from dinfer_engine.ranks.failure import RankFailure
from dinfer_engine.request import GenerationRequest
from dinfer_engine.result import GenerationResult

__all__ = ["CompileLimits", "EngineCache", "EngineFactory", "EngineOptions", "Prompt",
           "RankFailure", "WorkerEngine", "generation_config", "rank_devices", "resolve_config"]


@runtime_checkable
class WorkerEngine(Protocol):
    """What a worker needs from an engine: `dinfer_engine.Engine`, or a stand-in
    (tests/stand_in_engines.py)."""

    @property
    def tokenizer(self) -> Any: ...

    def generate(self, requests: Sequence[Prompt | GenerationRequest],
                 config: GenerationConfig | None = None,
                 on_result: Callable[[int, GenerationResult], None] | None = None
                 ) -> list[GenerationResult]: ...

    def constraint_error(self, spec: ConstraintSpec) -> str | None:
        """Why the constraint cannot be compiled, or None; compiled once per engine, its
        failure remembered as its grammar is (dinfer_engine.Engine.constraint_error)."""
        ...


EngineFactory = Callable[[str, str], WorkerEngine]


@dataclass(frozen=True)
class EngineOptions:
    """How this process loads its engines. tensor_parallel: ranks per engine (the worker's
    --tensor-parallel). prefix_cache_bytes: each engine's prompt prefix cache budget.
    kernels: "auto", "torch" or "triton" (dinfer_kernels/backend.py). factory: "module:factory"
    whose `factory(model, device)` replaces the engine with an object that has the same
    `generate` and `tokenizer` (a WorkerEngine; benchmarks and tests measure the service
    without the model's cost). constraint_limits: bytes of compiled grammars kept.
    constraint_memory_mb: the engine's budget of constrained rows' memory, over the
    checkpoint's generation_config.json (None: the checkpoint's or the engine's default)."""

    tensor_parallel: int = 1
    prefix_cache_bytes: int = 0
    kernels: str = "auto"
    factory: str | None = None
    constraint_limits: CompileLimits = CompileLimits()
    constraint_memory_mb: int | None = None


class EngineCache:
    """A process's engines: `cache(model, device)` loads one as `options` say (an
    EngineFactory itself) and keeps it for the next call; another model or device closes
    it first (a tensor-parallel engine's ranks end with it), so one engine is held."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self._loaded: dict[tuple[str, str], WorkerEngine] = {}

    def __call__(self, model: str, device: str) -> WorkerEngine:
        if (model, device) not in self._loaded:
            for engine in self._loaded.values():
                getattr(engine, "close", lambda: None)()
            self._loaded.clear()
            self._loaded[model, device] = _factory(self.options)(model, device)
        return self._loaded[model, device]


def rank_devices(device: str, ranks: int) -> list[str]:
    """Each rank's device as this process names it: `cuda:N` and the next GPUs, or cpu."""
    if ranks == 1 or not device.startswith("cuda"):
        return [device] * ranks
    first = int(device.partition(":")[2] or 0)
    return [f"cuda:{first + rank}" for rank in range(ranks)]


def _factory(options: EngineOptions) -> EngineFactory:
    if not options.factory:
        from dinfer_engine.engine import Engine

        def load(model: str, device: str) -> WorkerEngine:
            engine = Engine.from_pretrained(model, device=device,
                                            tensor_parallel=options.tensor_parallel,
                                            prefix_cache_bytes=options.prefix_cache_bytes,
                                            kernels=options.kernels)
            engine.constraints.limits = options.constraint_limits
            if options.constraint_memory_mb is not None:
                engine.model_defaults["constraint_memory_mb"] = options.constraint_memory_mb
            return engine

        return load
    module, _, name = options.factory.partition(":")
    factory: EngineFactory = getattr(importlib.import_module(module), name)
    return factory


def generation_config(fields: dict[str, Any]) -> GenerationConfig:
    """The engine's GenerationConfig; it raises ValueError for invalid values."""
    return GenerationConfig(**fields)


def resolve_config(fields: dict[str, Any], model_defaults: dict[str, Any],
                   family: str | None = None) -> ResolvedConfig:
    """The config as the engine would complete it from a model's generation_config.json
    (family: its FAMILIES key); ValueError when the values are invalid."""
    return generation_config(fields).resolve(model_defaults, family)
