"""A slow, one-sequence LLaDA2.1 `generate` (greedy), written step by step from the
published loop (dllm's `LLaDA2MoeModelLM.generate` in
dllm/pipelines/llada21/models/modeling_llada21_moe.py at ca176752), for the editing
decoder's tests and benchmarks/editing_bench.py.

Per block, `while True`: note the block's tokens and its masks; with no mask left count a
post-step, and stop once the post-steps exceed max_post_steps (without a forward); run
`forward` over the window up to the block's end; fill the masks whose confidence is above
`threshold` when there are at least num_to_transfer of them, else the num_to_transfer
most confident (at most the masks left); rewrite every non-mask, non-prompt position of
the block whose argmax differs from its token with confidence above editing_threshold;
stop when the iteration began with no mask and edited nothing. With eos_id (early stop),
stop after a block once the answer so far has no mask and holds EOS. The one deviation,
the engine's documented one: the mask token is never predicted.

`absolute_grid` False gives the same loop on LLaDA's semi-autoregressive blocks (block k
of the answer starts k * block_length after the prompt, the forward sees the whole
sequence), which is how the engine offers editing to bidirectional families."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tests.tiny_model import MASK_ID

Forward = Callable[[torch.Tensor], torch.Tensor]  # ids [L] -> logits [L, V]


@dataclass
class EditingRun:
    answer: list[int]  # gen_length tokens (masks after an early stop); the caller cuts at EOS
    forwards: int
    edited_tokens: int
    post_steps: int  # forwards over a block that had no mask left


def llada21_generate(forward: Forward, prompt: list[int], gen_length: int, block_length: int,
                     threshold: float, editing_threshold: float, max_post_steps: int,
                     num_to_transfer: int = 1, eos_id: int | None = None,
                     absolute_grid: bool = True) -> EditingRun:
    p = len(prompt)
    if absolute_grid:
        blocks = -(-(p + gen_length) // block_length)
        x = torch.full((blocks * block_length,), MASK_ID, dtype=torch.long)
        starts = [b * block_length for b in range(p // block_length, blocks)]
    else:
        x = torch.full((p + gen_length,), MASK_ID, dtype=torch.long)
        starts = [p + b * block_length for b in range(gen_length // block_length)]
    x[:p] = torch.tensor(prompt)
    run = EditingRun([], 0, 0, 0)
    for start in starts:
        end = start + block_length
        in_prompt = torch.arange(start, end) < p
        post_steps = 0
        while True:
            old = x[start:end].clone()
            active = old == MASK_ID
            if not active.any():
                post_steps += 1
            if post_steps > max_post_steps:
                break
            window = x[:end] if absolute_grid else x
            logits = forward(window)[start:end].double()
            run.forwards += 1
            run.post_steps += int(not active.any())
            probs = logits.softmax(-1)
            logits[:, MASK_ID] = -torch.inf
            tokens = logits.argmax(-1)
            confidence = probs.gather(1, tokens[:, None])[:, 0]
            fill = torch.zeros_like(active)
            if active.any():
                mask_confidence = torch.where(active, confidence, -torch.inf)
                high = (mask_confidence > threshold) & active
                if int(high.sum()) >= num_to_transfer:
                    fill = high
                else:
                    count = min(num_to_transfer, int(active.sum()))
                    fill[mask_confidence.topk(count).indices] = True
            editable = ~active & ~in_prompt
            edit = editable & (confidence > editing_threshold) & (tokens != old)
            x[start:end] = torch.where(fill | edit, tokens, old)
            run.edited_tokens += int(edit.sum())
            if not active.any() and not edit.any():
                break
        answer_so_far = x[p:end]
        if eos_id is not None and not (answer_so_far == MASK_ID).any() \
                and (answer_so_far == eos_id).any():
            break
    run.answer = x[p:p + gen_length].tolist()
    return run
