"""LM head + confidence: the next token of every masked position and its probability,
from the hidden states, without handing [N, vocabulary] logits back to the engine.

`lm_head_confidence` dispatches to the Triton kernel (dinfer_kernels/lm_head_triton.py), which
streams over the vocabulary with an online log-sum-exp, or to the PyTorch reference below,
which materialises the logits (dinfer_kernels/backend.py decides).
"""

from __future__ import annotations

import torch

from dinfer_kernels import counter_rng
from dinfer_kernels.backend import use_triton


def lm_head_confidence(hidden: torch.Tensor, weight: torch.Tensor, *, banned: int | None = None,
                       temperature: float = 0.0, seeds: torch.Tensor | None = None,
                       step: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens [N] int64 and confidence [N] float32 for hidden [N, d] under head weight
    [V, d]. temperature 0: the argmax of the logits (first index on ties), skipping token
    `banned`. temperature > 0: Gumbel-max sampling of softmax(logits / temperature) with
    noise keyed by (seeds[i], step, vocabulary index) (dinfer_kernels/counter_rng.py); `step` is
    an int or an int64 tensor [N]. confidence is the chosen token's probability under
    softmax(logits), whose normaliser includes `banned`. Accumulates in fp32."""
    steps = _check(hidden, weight, banned, temperature, seeds, step)
    seeds = seeds.to(hidden.device) if seeds is not None else None
    if use_triton(hidden.device):
        from dinfer_kernels import lm_head_triton
        return lm_head_triton.lm_head_confidence(hidden, weight, banned, temperature, seeds,
                                                 steps)
    return lm_head_confidence_reference(hidden, weight, banned, temperature, seeds, steps)


def lm_head_confidence_reference(hidden: torch.Tensor, weight: torch.Tensor,
                                 banned: int | None, temperature: float,
                                 seeds: torch.Tensor | None,
                                 steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same maths in plain PyTorch, with the full fp32 logits in memory."""
    logits = hidden.float() @ weight.float().T
    log_normaliser = torch.logsumexp(logits, dim=-1)
    scores = logits.clone()
    if temperature > 0:
        if seeds is None:
            raise ValueError("sampling (temperature > 0) needs seeds")
        noise = counter_rng.uniform(seeds, steps, weight.shape[0])
        scores = scores / temperature - torch.log(-torch.log(noise))
    if banned is not None:
        scores[:, banned] = -torch.inf
    tokens = scores.argmax(-1)
    chosen = logits.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, torch.exp(chosen - log_normaliser)


def _check(hidden: torch.Tensor, weight: torch.Tensor, banned: int | None, temperature: float,
           seeds: torch.Tensor | None, step: int | torch.Tensor) -> torch.Tensor:
    """Validate the arguments; returns the steps as an int64 tensor [N]."""
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [N, d] and weight [V, d] expected, got "
                         f"{list(hidden.shape)} and {list(weight.shape)}")
    if banned is not None and not 0 <= banned < weight.shape[0]:
        raise ValueError(f"banned token {banned} outside the vocabulary [0, {weight.shape[0]})")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    n = hidden.shape[0]
    if temperature > 0 and (seeds is None or seeds.shape != (n,)):
        raise ValueError(f"sampling needs seeds: an int64 tensor [{n}], one per row")
    steps = torch.as_tensor(step, dtype=torch.long, device=hidden.device)
    if steps.dim() > 1 or (steps.dim() == 1 and steps.shape[0] != n):
        raise ValueError(f"step must be an int or an int64 tensor [{n}]")
    return steps.expand(n).contiguous()
