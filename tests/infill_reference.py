"""A slow reference for filling in the middle, written by us from dllm's MDLM sampler
(github ZHZisZZ/dllm at ca176752, dllm/core/samplers/mdlm.py `infill`, with
dllm/core/samplers/utils.py `get_num_transfer_tokens` and the default
LinearAlphaScheduler): one sequence at a time, temperature 0, low-confidence remasking.

The canvas is decoded in place: block windows of `block_size` columns counted from the
first token of the sequence (None: one window over the whole canvas), each given
ceil(steps / windows) steps; a window's masks are spread over its steps by the
scheduler's rounding and steps that would commit nothing are dropped; at every step the
whole canvas is run and the most confident masked positions inside the window are
committed. The one deviation, shared with the LLaDA reference of
tests/engine/test_engine_decoding.py: the mask token is never predicted."""

from __future__ import annotations

import math

import torch

from tests.tiny_model import MASK_ID


def transfer_counts(masks: int, steps: int) -> list[int]:
    """get_num_transfer_tokens for one window holding `masks` masks, not stochastic,
    linear alpha(t) = 1 - t, zero steps dropped."""
    counts, left = [], masks
    for j in range(steps):
        t = torch.tensor((steps - j) / steps, dtype=torch.float32)
        s = torch.tensor((steps - j - 1) / steps, dtype=torch.float32)
        reverse_mask_prob = ((1 - (1 - s)) / (1 - (1 - t))).item()  # float32, as alpha()
        wanted = torch.tensor(left, dtype=torch.float64) * (1 - reverse_mask_prob)
        count = min(int(torch.round(wanted)), left)
        left -= count
        if count:
            counts.append(count)
        if not left:
            break
    return counts


@torch.no_grad()
def mdlm_infill(model: torch.nn.Module, canvas: list[int], steps: int,
                block_size: int | None = None) -> list[int]:
    """The canvas (prompt, masks, given text) with every mask filled."""
    x = torch.tensor([canvas])
    length = len(canvas)
    size = block_size or length
    windows = math.ceil(length / size)
    for b in range(windows):
        start, stop = b * size, min((b + 1) * size, length)
        for count in transfer_counts(int((x[0, start:stop] == MASK_ID).sum()),
                                     math.ceil(steps / windows)):
            logits = model(x).logits[0]
            confidence_of = torch.softmax(logits, dim=-1)  # the model's dtype, as dllm
            logits[:, MASK_ID] = -torch.inf
            predicted = logits.argmax(-1)
            confidence = confidence_of.gather(-1, predicted[:, None]).squeeze(-1)
            confidence[:start] = -torch.inf
            confidence[stop:] = -torch.inf
            masked = x[0] == MASK_ID
            confidence = torch.where(masked, confidence, -torch.inf)
            chosen = torch.topk(confidence, k=count).indices
            x[0, chosen] = predicted[chosen]
    return x[0].tolist()
