"""Building blocks shared by every model family: RMSNorm, (partial) rotary embeddings,
QK-norm attention through the KV cache (dinfer_engine/models/forward_inputs.py), the SwiGLU MLP."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.models.forward_inputs import ForwardInputs, cached_attention


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32, scaled by a learned weight."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.to(x.dtype) * self.weight


def rope_cos_sin(
    position_ids: torch.Tensor, rotary_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [B, 1, S, rotary_dim] for the half-split rotary embedding, in fp32
    maths. rotary_dim is head_dim, or fewer for partial RoPE (frequencies over rotary_dim)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, rotary_dim, 2, device=position_ids.device, dtype=torch.float32)
        / rotary_dim
    )
    angles = position_ids.float()[..., None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [B, H, S, D] by the half-split convention (rotate_half as in Llama/LLaDA);
    with partial RoPE only the first cos.shape[-1] dims rotate, the rest pass through."""
    dim = cos.shape[-1]
    if dim < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :dim], cos, sin), x[..., dim:]], dim=-1)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate x) * up x), with the Hugging Face parameter names."""

    tensor_parallel: ClassVar[dict[str, str]] = {  # dinfer_engine/parallel/layers.py
        "gate_proj": "column", "up_proj": "column", "down_proj": "row"}

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def attend_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_norm: RMSNorm | None,
                 k_norm: RMSNorm | None, inputs: ForwardInputs, layer: int) -> torch.Tensor:
    """QK-norm attention over heads q [B, S, H, D], k/v [B, S, H_kv, D]: RMSNorm over
    head_dim on every query and key head (when the model has the norms), then (partial)
    RoPE, then cached_attention. Returns [B, S, H * D]."""
    b, s = q.shape[:2]
    if q_norm is not None and k_norm is not None:
        q, k = q_norm(q), k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    q, k = apply_rope(q, *inputs.rope), apply_rope(k, *inputs.rope)
    out = cached_attention(q, k, v.transpose(1, 2), inputs, layer)
    return out.transpose(1, 2).reshape(b, s, -1)
