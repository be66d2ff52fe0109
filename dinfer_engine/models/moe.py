"""Mixture-of-experts feed-forward: the two routers of the LLaDA families and grouped
expert compute over fused expert weights.

Expert weights live fused, as the fused-MoE kernels take them: w13 [E, 2I, H] (each
expert's gate rows, then its up rows) and w2 [E, H, I] (its down projection), whatever
layout the checkpoint stores (dinfer_engine/loading/checkpoint.py fills them per expert or whole).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.models.layers import GatedMLP
from dinfer_engine.models.moe_config import SOFTMAX, MoEConfig
from dinfer_kernels import fused_moe, use_triton

CheckpointMap = dict[str, tuple[str, tuple | None]]


def softmax_router(logits: torch.Tensor, top_k: int,
                   expert_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA-MoE: p = softmax(logits) in fp32, plus the expert bias when there is one; the
    top-k of those values choose the experts and are their weights (no renormalisation)."""
    scores = logits.float().softmax(dim=-1)
    if expert_bias is not None:
        scores = scores + expert_bias.float()
    weights, ids = scores.topk(top_k, dim=-1)
    return ids, weights


def grouped_sigmoid_router(logits: torch.Tensor, top_k: int, expert_bias: torch.Tensor | None,
                           n_group: int, topk_group: int,
                           scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA2: s = sigmoid(logits) in fp32; routing score s + bias; experts in n_group
    groups, each scored by the sum of its best two routing scores; only the best
    topk_group groups compete; top-k experts by routing score; weights are their unbiased
    s, divided by their sum when k > 1, times `scale`."""
    scores = logits.float().sigmoid()
    routing = scores if expert_bias is None else scores + expert_bias.float()
    tokens, experts = routing.shape
    grouped = routing.view(tokens, n_group, experts // n_group)
    group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)
    kept = group_scores.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
    allowed = group_mask.repeat_interleave(experts // n_group, dim=1)
    ids = routing.masked_fill(~allowed, -torch.inf).topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if top_k > 1:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, weights * scale


def grouped_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                    topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """sum_k topk_weights[t, k] * down_e(silu(gate_e x_t) * up_e x_t), e = topk_ids[t, k].

    x [T, H]; w13 [E, 2I, H]; w2 [E, H, I]; topk_ids/weights [T, K]. The T*K assignments
    are sorted by expert and each expert's rows go through one matmul per projection (a
    loop over experts, never over tokens). The K outputs of a token are weighted and summed
    in fp32, in slot order, as the published modelling code does. Assignments with id -1
    are skipped (output 0: another expert-parallel rank's experts)."""
    tokens, k = topk_ids.shape
    flat = topk_ids.flatten()
    order = flat.argsort(stable=True)
    skipped = int((flat < 0).sum())
    counts = torch.bincount(flat[flat >= 0] if skipped else flat,
                            minlength=w13.shape[0]).tolist()
    out = x.new_zeros(tokens * k, x.shape[-1]) if skipped else x.new_empty(tokens * k,
                                                                          x.shape[-1])
    start = skipped
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        slots = order[start:start + count]
        gate, up = (x[slots // k] @ w13[expert].T).chunk(2, dim=-1)
        out[slots] = (F.silu(gate) * up) @ w2[expert].T
        start += count
    weighted = out.view(tokens, k, -1).float() * topk_weights[..., None].float()
    return weighted.sum(dim=1).to(x.dtype)


class Router(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, cfg.hidden_size))
        self.expert_bias = nn.Parameter(torch.empty(cfg.num_experts)) if cfg.expert_bias else None

    def forward(self, x: torch.Tensor, cfg: MoEConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """Router logits as each published model computes them: LLaDA-MoE in the model's
        dtype (softmax then in fp32), LLaDA2 in fp32."""
        if cfg.router == SOFTMAX:
            return softmax_router(F.linear(x, self.weight), cfg.top_k, self.expert_bias)
        logits = F.linear(x.float(), self.weight.float())
        return grouped_sigmoid_router(logits, cfg.top_k, self.expert_bias, cfg.n_group,
                                      cfg.topk_group, cfg.routed_scaling_factor)


class SparseMoE(nn.Module):
    """Routed experts (fused weights) plus the shared expert when the config has one."""

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        e, i, h = cfg.num_experts, cfg.expert_intermediate_size, cfg.hidden_size
        self.gate = Router(cfg)
        self.w13 = nn.Parameter(torch.empty(e, 2 * i, h))
        self.w2 = nn.Parameter(torch.empty(e, h, i))
        self.shared_experts = (GatedMLP(h, cfg.shared_intermediate_size)
                               if cfg.shared_intermediate_size else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        ids, weights = self.gate(flat, self.cfg)
        experts = fused_moe if use_triton(flat.device) else grouped_experts
        out = experts(flat, self.w13, self.w2, ids, weights).view_as(x)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out


def expert_checkpoint_map(checkpoint_prefix: str, param_prefix: str, cfg: MoEConfig,
                          available: set[str]) -> CheckpointMap:
    """Checkpoint tensors that fill one layer's fused expert weights: the fused layout
    (`{prefix}.w1` [E, 2I, H] = per expert cat(gate, up), `{prefix}.w2` [E, H, I]) when the
    checkpoint has it, else one gate/up/down tensor per expert (all required)."""
    w13, w2 = f"{param_prefix}.w13", f"{param_prefix}.w2"
    if f"{checkpoint_prefix}.w1" in available:
        return {f"{checkpoint_prefix}.w1": (w13, None), f"{checkpoint_prefix}.w2": (w2, None)}
    i = cfg.expert_intermediate_size
    mapping: CheckpointMap = {}
    for j in range(cfg.num_experts):
        expert = f"{checkpoint_prefix}.experts.{j}"
        mapping[f"{expert}.gate_proj.weight"] = (w13, (j, slice(0, i)))
        mapping[f"{expert}.up_proj.weight"] = (w13, (j, slice(i, 2 * i)))
        mapping[f"{expert}.down_proj.weight"] = (w2, (j,))
    return mapping
