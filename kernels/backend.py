"""Which implementation runs: the Triton kernels or their PyTorch references.

`DINFER_BATCH_KERNELS` chooses: `auto` (default) takes Triton for CUDA tensors when
`triton` imports and PyTorch otherwise; `torch` always takes the references; `triton`
always takes the kernels, which on CPU tensors means Triton's interpreter (it must be
switched on with TRITON_INTERPRET=1 before triton compiles anything: that is how the
tests run the kernels without a GPU).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

ENV_VAR = "DINFER_BATCH_KERNELS"
CHOICES = ("auto", "torch", "triton")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def requested() -> str:
    choice = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


def use_triton(device: torch.device) -> bool:
    """True when the kernels (not the references) should run for tensors on `device`."""
    choice = requested()
    if choice == "torch":
        return False
    if choice == "auto":
        return device.type == "cuda" and triton_available()
    if not triton_available():
        raise RuntimeError(f"{ENV_VAR}=triton but the triton package is not installed")
    if device.type != "cuda" and not interpreting():
        raise RuntimeError(f"{ENV_VAR}=triton on {device.type} tensors needs Triton's "
                           "interpreter: set TRITON_INTERPRET=1")
    return True
