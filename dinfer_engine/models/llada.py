"""LLaDA (dense, Llama-style blocks) with the checkpoint's own parameter names.

Parameter paths match GSAI-ML/LLaDA-8B-Instruct's safetensors keys exactly:
`model.transformer.wte.weight`, `model.transformer.blocks.N.<proj>.weight`,
`model.transformer.ln_f.weight`, `model.transformer.ff_out.weight` (absent when tied).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.config import LLaDAConfig
from dinfer_engine.models.forward_inputs import ForwardInputs, cached_attention
from dinfer_engine.models.layers import RMSNorm, apply_rope


class LLaDABlock(nn.Module):
    # how the projections split across tensor-parallel ranks (dinfer_engine/parallel/layers.py)
    tensor_parallel: ClassVar[dict[str, str]] = {
        "q_proj": "heads", "k_proj": "kv_heads", "v_proj": "kv_heads", "attn_out": "heads_in",
        "ff_proj": "column", "up_proj": "column", "ff_out": "row"}

    def __init__(self, cfg: LLaDAConfig) -> None:
        super().__init__()
        d, kv, hidden, bias = (cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.mlp_hidden_size,
                               cfg.include_bias)
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = nn.Linear(d, kv, bias=bias)
        self.v_proj = nn.Linear(d, kv, bias=bias)
        self.attn_out = nn.Linear(d, d, bias=bias)
        self.ff_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(d, hidden, bias=bias)  # the SwiGLU gate
        self.up_proj = nn.Linear(d, hidden, bias=bias)
        self.ff_out = nn.Linear(hidden, d, bias=bias)

    def forward(self, x: torch.Tensor, inputs: ForwardInputs, layer: int) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, *inputs.rope), apply_rope(k, *inputs.rope)
        attn = cached_attention(q, k, v, inputs, layer)
        attn = attn.transpose(1, 2).reshape(b, s, -1)
        x = x + self.attn_out(attn)
        h = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))


class LLaDAModelLM(DiffusionLM):
    """Dense LLaDA: bidirectional attention."""

    @staticmethod
    def read_config(raw: dict[str, Any], special_ids: dict[str, int]) -> LLaDAConfig:
        return LLaDAConfig.from_dict(raw)

    def __init__(self, cfg: LLaDAConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = nn.Module()
        transformer = nn.ModuleDict({
            "wte": nn.Embedding(cfg.embedding_size, cfg.d_model),
            "blocks": nn.ModuleList(LLaDABlock(cfg) for _ in range(cfg.n_layers)),
            "ln_f": RMSNorm(cfg.d_model, cfg.rms_norm_eps),
        })
        if not cfg.weight_tying:
            transformer["ff_out"] = nn.Linear(cfg.d_model, cfg.embedding_size, bias=False)
        self.model.transformer = transformer

    def transformer(self) -> nn.ModuleDict:
        return cast(nn.ModuleDict, self.model.transformer)

    def embedding(self) -> nn.Embedding:
        return cast(nn.Embedding, self.transformer()["wte"])

    def decoder_layers(self) -> nn.ModuleList:
        return cast(nn.ModuleList, self.transformer()["blocks"])

    def final_norm(self) -> nn.Module:
        return self.transformer()["ln_f"]

    def head_weight(self) -> torch.Tensor:
        head = self.embedding() if self.config.weight_tying else self.transformer()["ff_out"]
        return cast(torch.Tensor, head.weight)
