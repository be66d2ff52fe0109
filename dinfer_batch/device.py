"""Check a `--device` before anything is written or started, so a typo or a missing GPU is
one usage error (exit code 2) instead of a job that stays in progress forever."""

from __future__ import annotations

from dinfer_batch.errors import UserError


def check_device(device: str, requested: str | None = None) -> None:
    """UserError unless this process can run the engine on `device`. `requested` is what the
    user typed, when `device` is its pinned form (`cuda:3` seen as `cuda:0`). Asking torch
    about CUDA initialises it, so a worker calls this only after pinning its GPU."""
    if device == "cpu":  # always there; spares torch's import where nothing else needs it
        return
    import torch

    shown = requested or device
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device {shown!r}; use cpu, cuda or cuda:N") from None
    if parsed.type == "cpu":
        return
    if parsed.type != "cuda":
        raise UserError(f"unsupported device {shown!r}; use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise UserError(f"device {shown!r} is not available: no CUDA GPU is visible to "
                        "PyTorch here; use --device cpu")
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise UserError(f"device {shown!r} is not available: this machine has "
                        f"{torch.cuda.device_count()} CUDA GPU(s)")
