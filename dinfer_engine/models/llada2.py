"""LLaDA2 (`model_type` "llada2_moe": LLaDA2.0-mini / flash) and LLaDA2.1: fused QKV
with per-head QK-norm, partial RoPE, sigmoid group-limited routing with shared experts, and block
diffusion (block-causal attention; dinfer_engine/forwards/block_forward.py).

Checkpoint names: `model.word_embeddings`, `model.layers.N.attention.query_key_value`
(heads split as [H q | KV k | KV v] by head_dim), `attention.{query,key}_layernorm`,
`attention.dense`, `input_layernorm`, `post_attention_layernorm`; dense MLP
`mlp.{gate,up,down}_proj` below `first_k_dense_replace`, else `mlp.gate.weight`,
`mlp.gate.expert_bias`, `mlp.experts.J.*` (or fused `mlp.w1`/`mlp.w2`),
`mlp.shared_experts.*`; `model.norm`, `lm_head`. Layers past num_hidden_layers (MTP
heads) are ignored.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from dinfer_engine.models.forward_inputs import ForwardInputs
from dinfer_engine.models.layers import RMSNorm, attend_heads
from dinfer_engine.models.moe_base import MoEModelLM
from dinfer_engine.models.moe_config import MoEConfig


class LLaDA2Attention(nn.Module):
    tensor_parallel: ClassVar[dict[str, str]] = {  # dinfer_engine/parallel/layers.py
        "query_key_value": "qkv_heads", "dense": "heads_in"}

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, d
        self.query_key_value = nn.Linear(h, (cfg.n_heads + 2 * cfg.n_kv_heads) * d,
                                         bias=cfg.qkv_bias)
        self.query_layernorm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.key_layernorm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.dense = nn.Linear(cfg.n_heads * d, h, bias=cfg.out_bias)

    def forward(self, x: torch.Tensor, inputs: ForwardInputs, layer: int) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.query_key_value(x).view(b, s, -1, self.head_dim)
        q, k, v = qkv.split([self.n_heads, self.n_kv_heads, self.n_kv_heads], dim=2)
        out = attend_heads(q, k, v, self.query_layernorm, self.key_layernorm, inputs, layer)
        return self.dense(out)


class LLaDA2MoeModelLM(MoEModelLM):
    embedding_name = "word_embeddings"
    attention_name = "attention"

    @staticmethod
    def read_config(raw: dict[str, Any], special_ids: dict[str, int]) -> MoEConfig:
        return MoEConfig.for_llada2(raw, special_ids)

    def make_attention(self, cfg: MoEConfig) -> nn.Module:
        return LLaDA2Attention(cfg)


class LLaDA21MoeModelLM(LLaDA2MoeModelLM):
    """LLaDA2.1 (`model_type` "llada21_moe"): LLaDA2's architecture and checkpoint names,
    decoded by default with token editing (dinfer_engine/decoding/editing.py): its own
    class so that its registry entry, and with it its defaults, can be found."""
