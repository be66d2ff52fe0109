"""Building blocks shared by every model family: RMSNorm, rotary embeddings, attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
    position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [B, 1, S, head_dim] for the half-split rotary embedding, in fp32 maths."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim
    )
    angles = position_ids.float()[..., None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [B, H, S, D] by the half-split convention (rotate_half as in Llama/LLaDA)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Bidirectional attention; q [B, H, S, D], k/v [B, H_kv, Lk, D], mask broadcastable to
    [B, H, S, Lk] with True = may attend. Grouped KV heads are expanded by SDPA."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1]
    )
