"""LLaDA-MoE (e.g. LLaDA-MoE-7B-A1B-Instruct): bidirectional attention with per-head
QK-norm, softmax-routed experts, in the Hugging Face layout.

Checkpoint names: `model.embed_tokens`, `model.layers.N.self_attn.{q,k,v,o}_proj`,
`self_attn.{q,k}_norm`, `input_layernorm`, `post_attention_layernorm`; MoE layers
`mlp.gate.weight`, `mlp.expert_bias` (when enabled), `mlp.experts.J.{gate,up,down}_proj`
or fused `mlp.w1`/`mlp.w2`, and `shared_expert.*` beside the MLP when configured; dense
layers `mlp.{gate,up,down}_proj`; `model.norm`, `lm_head`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from dinfer_engine.models.forward_inputs import ForwardInputs
from dinfer_engine.models.layers import RMSNorm, attend_heads
from dinfer_engine.models.moe_base import MoEModelLM
from dinfer_engine.models.moe_config import MoEConfig


class LLaDAMoEAttention(nn.Module):
    tensor_parallel: ClassVar[dict[str, str]] = {  # dinfer_engine/parallel/layers.py
        "q_proj": "heads", "k_proj": "kv_heads", "v_proj": "kv_heads", "o_proj": "heads_in"}

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.n_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.n_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.n_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * d, h, bias=cfg.out_bias)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, inputs: ForwardInputs, layer: int) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim)
        out = attend_heads(q, k, v, self.q_norm, self.k_norm, inputs, layer)
        return self.o_proj(out)


class LLaDAMoEModelLM(MoEModelLM):
    embedding_name = "embed_tokens"
    attention_name = "self_attn"

    @staticmethod
    def read_config(raw: dict[str, Any], special_ids: dict[str, int]) -> MoEConfig:
        return MoEConfig.for_llada_moe(raw, special_ids)

    def make_attention(self, cfg: MoEConfig) -> nn.Module:
        return LLaDAMoEAttention(cfg)

    def checkpoint_name(self, param: str) -> str:
        """The expert bias sits on the MLP, the shared expert beside it."""
        return param.replace(".mlp.gate.expert_bias", ".mlp.expert_bias").replace(
            ".mlp.shared_experts.", ".shared_expert.")
