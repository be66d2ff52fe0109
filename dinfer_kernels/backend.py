"""Which implementation runs: the Triton kernels or their PyTorch references.

The choice is the engine's `kernels` field (`dinfer_engine.Engine`; the service reads it from
DINFER_BATCH_KERNELS once per worker process): `auto` takes Triton for CUDA tensors when
`triton` imports and PyTorch otherwise; `torch` always takes the references; `triton`
always takes the kernels, which on CPU tensors means Triton's interpreter (it must be
switched on with TRITON_INTERPRET=1 before triton compiles anything: that is how the
tests run the kernels without a GPU). The engine holds its choice for the length of a
call (`choosing`); the dispatchers below read it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

ENV_VAR = "DINFER_BATCH_KERNELS"  # the service's name for the choice (dinfer_batch/config.py)
_chosen: ContextVar[str] = ContextVar("kernels", default="auto")


def interpreting() -> bool:
    """Triton's own switch, which triton reads too."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


@contextmanager
def choosing(choice: str) -> Iterator[None]:
    """Run the block with `choice` (dinfer_engine.choices.KERNELS) deciding every dispatch."""
    token = _chosen.set(choice)
    try:
        yield
    finally:
        _chosen.reset(token)


def use_triton(device: torch.device) -> bool:
    """True when the kernels (not the references) should run for tensors on `device`."""
    choice = _chosen.get()
    if choice == "torch":
        return False
    if choice == "auto":
        return device.type == "cuda" and triton_available()
    if choice != "triton":
        raise ValueError(f"kernels={choice!r}: not one of dinfer_engine.choices.KERNELS")
    if not triton_available():
        raise RuntimeError(f"{ENV_VAR}=triton but the triton package is not installed")
    if device.type != "cuda" and not interpreting():
        raise RuntimeError(f"{ENV_VAR}=triton on {device.type} tensors needs Triton's "
                           "interpreter: set TRITON_INTERPRET=1")
    return True
