"""Mixture-of-experts feed-forward over routed tokens, experts stored fused:
w13 [E, 2I, H] (each expert's gate rows, then its up rows) and w2 [E, H, I].

    y[t] = sum_j topk_weights[t, j] * w2[e] @ (act(w13[e, :I] @ x[t]) * (w13[e, I:] @ x[t])),
    e = topk_ids[t, j]

act: SiLU (the LLaDA families' SwiGLU) or GELU with the tanh approximation (Gemma's,
DiffusionGemma's experts): ACTIVATIONS.

`fused_moe` dispatches to the Triton kernels (dinfer_kernels/moe_triton.py: tokens grouped by
expert, one launch per GEMM) or to the PyTorch reference below (dinfer_kernels/backend.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dinfer_kernels.backend import use_triton

ACTIVATIONS = ("silu", "gelu_tanh")


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
              topk_weights: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """y [T, H] in x's dtype for x [T, H] routed by topk_ids / topk_weights [T, k].
    Accumulates in fp32; the activated intermediate is rounded to x's dtype between the
    two GEMMs (as a torch matmul in that dtype would). activation: one of ACTIVATIONS."""
    _check(x, w13, w2, topk_ids, topk_weights)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: not one of {', '.join(ACTIVATIONS)}")
    if use_triton(x.device):
        from dinfer_kernels import moe_triton
        return moe_triton.fused_moe(x, w13, w2, topk_ids, topk_weights, activation)
    return fused_moe_reference(x, w13, w2, topk_ids, topk_weights, activation)


def fused_moe_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                        topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                        activation: str = "silu") -> torch.Tensor:
    """The same maths in plain PyTorch: one expert at a time over the tokens routed to it."""
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in topk_ids.unique().tolist():
        tokens, slots = (topk_ids == expert).nonzero(as_tuple=True)
        gate_up = x[tokens].float() @ w13[expert].float().T
        gate = gate_up[:, :inter]
        gate = F.silu(gate) if activation == "silu" else F.gelu(gate, approximate="tanh")
        act = (gate * gate_up[:, inter:]).to(x.dtype).float()
        down = act @ w2[expert].float().T
        out.index_add_(0, tokens, down * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)


def _check(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
           topk_weights: torch.Tensor) -> None:
    experts, two_inter, hidden = w13.shape
    if (x.dim() != 2 or x.shape[1] != hidden or two_inter % 2
            or w2.shape != (experts, hidden, two_inter // 2)):
        raise ValueError(f"x [T, H], w13 [E, 2I, H], w2 [E, H, I] expected, got "
                         f"{list(x.shape)}, {list(w13.shape)}, {list(w2.shape)}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0] \
            or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_ids and topk_weights [T, k] expected, got "
                         f"{list(topk_ids.shape)} and {list(topk_weights.shape)}")
