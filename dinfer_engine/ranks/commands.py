"""What every rank of a tensor-parallel engine runs, on rank 0's word: the same
generation loop as a one-rank engine (its collectives keep the ranks in step), and the
few queries tests and benchmarks make. Helper ranks receive (name, args) and call
COMMANDS[name](model, *args); rank 0 calls the same function alongside."""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dinfer_engine import loop
from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.prefix_cache import PrefixCache
from dinfer_kernels import backend

_helper_prefix: dict[int, PrefixCache] = {}  # a helper rank's prefix cache, by its model


@dataclass(frozen=True)
class RankCall:
    """One generate call as every rank runs it: the rows (dinfer_engine.batch.Request, sent
    as they are), the resolved config, the stop tokens, rank 0's kernels (which every rank
    follows, so that all take the same path through prediction.predict_block and its
    collectives) and rank 0's prefix cache budget (a helper keeps its own cache of its
    shard, which makes the same choices as rank 0's: dinfer_engine/prefix_cache.py)."""

    requests: list[Request]
    config: ResolvedConfig
    stop_ids: list[int]
    kernels: str
    prefix_budget: int


def generate(model: DiffusionLM, call: RankCall,
             on_finish: Callable[[FinishedRow], None] | None = None,
             prefix: PrefixCache | None = None) -> None:
    """The family's loop over the call's rows on this rank; `on_finish` and `prefix`
    (the engine's prefix cache) are rank 0's own."""
    if prefix is None and call.prefix_budget:
        prefix = _helper_prefix.setdefault(
            id(model), PrefixCache(call.prefix_budget, model.kv_token_bytes()))
    with backend.choosing(call.kernels):
        loop.run(model, call.requests, call.config, call.stop_ids,
            on_finish or (lambda row: None), prefix)


@torch.inference_mode()
def logits(model: nn.Module, token_ids: list[list[int]]) -> torch.Tensor:
    """This rank's vocabulary slice of the logits of a plain forward over `token_ids`."""
    device = next(model.parameters()).device
    return model(torch.tensor(token_ids, device=device)).logits.cpu()


def parameter_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def peak_memory_mb(model: nn.Module) -> float:
    """This rank's peak memory: CUDA's peak allocated, or the process's own peak resident
    memory. Linux's VmHWM is the process's own; its ru_maxrss starts from the peak of the
    process that started it (a rank spawned by a large process reports that one's)."""
    device = next(model.parameters()).device
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    status = Path("/proc/self/status")
    if status.exists():
        return next(int(line.split()[1]) for line in status.read_text().splitlines()
                    if line.startswith("VmHWM:")) / 2**10
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


COMMANDS: dict[str, Callable[..., Any]] = {
    "generate": generate, "logits": logits, "parameter_bytes": parameter_bytes,
    "peak_memory_mb": peak_memory_mb}
