"""The fixed decoder's schedule for infill rows: dllm's MDLM sampler (`infill`, with its
default linear alpha scheduler, deterministic) spreads a block's masked positions over
its steps by rounding, not as LLaDA's even split (decoders.linear_schedule), and skips
the steps that would commit nothing. An infill block can hold any number of masks (its
window also covers given text), so the infill canvas (dinfer_engine/canvas/infill.py) works out
each row's counts when it starts a block, from the masks in it, and keeps them as row
state."""

from __future__ import annotations

import torch


def mdlm_counts(masks: torch.Tensor, steps: int) -> torch.Tensor:
    """[B, steps] tokens to commit at each step for blocks holding `masks` [B] masked
    positions: at step j (time t = (steps - j) / steps going to s = t - 1 / steps), the
    remaining masks times the reverse transfer probability 1 - s / t, the ratio computed
    in float32 as the scheduler does, the product rounded half to even in float64 and
    capped by what remains; the zero steps dropped and the others moved to the front."""
    remaining = masks.to(torch.long).clone()
    counts = torch.zeros(len(masks), steps, dtype=torch.long, device=masks.device)
    for j in range(steps):
        t = torch.tensor((steps - j) / steps, dtype=torch.float32)
        s = torch.tensor((steps - j - 1) / steps, dtype=torch.float32)
        kept = float((1 - (1 - s)) / (1 - (1 - t)))  # 1 - alpha(s) over 1 - alpha(t)
        count = torch.round(remaining.to(torch.float64) * (1 - kept)).to(torch.long)
        counts[:, j] = torch.minimum(count, remaining)
        remaining -= counts[:, j]
    order = (counts == 0).to(torch.long).argsort(dim=-1, stable=True)
    return counts.gather(1, order)
