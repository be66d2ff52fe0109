"""LLaDA (dense, Llama-style blocks) with the checkpoint's own parameter names.

Parameter paths match GSAI-ML/LLaDA-8B-Instruct's safetensors keys exactly:
`model.transformer.wte.weight`, `model.transformer.blocks.N.<proj>.weight`,
`model.transformer.ln_f.weight`, `model.transformer.ff_out.weight` (absent when tied).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import LLaDAConfig
from engine.kv_cache import KVCache
from engine.layers import RMSNorm, apply_rope, attend, rope_cos_sin


@dataclass
class ModelOutput:
    logits: torch.Tensor


class LLaDABlock(nn.Module):
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

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        cache: KVCache | None,
        layer: int,
        rows: torch.Tensor | None,
        store: bool,
    ) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None and store:
            cache.store(layer, k, v, rows)
        elif cache is not None:
            k, v = cache.read(layer, k, v, rows)
        attn = attend(q, k, v, mask).transpose(1, 2).reshape(b, s, -1)
        x = x + self.attn_out(attn)
        h = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))


class LLaDAModelLM(nn.Module):
    """Mask predictor: a bidirectional transformer returning logits over the vocabulary."""

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

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.transformer["wte"]

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        cache_rows: torch.Tensor | None = None,
        store_cache: bool = False,
        logits_index: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> ModelOutput:
        """input_ids [B, S]; position_ids [B, S] (default 0..S-1); attention_mask: bool,
        broadcastable to [B, 1, S, keys] (True = attend; [B, keys] is taken as a key mask);
        with `cache`, either store this full-row forward's keys/values into rows
        `cache_rows`, or read those rows' cached columns ahead of the fresh keys;
        logits_index [B, K] picks the positions whose logits are returned (default all);
        inputs_embeds [B, S, d_model], when given, replaces the embedding of input_ids."""
        t = self.model.transformer
        b, s = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        if attention_mask is not None and attention_mask.dim() == 2:
            attention_mask = attention_mask[:, None, None, :]
        elif attention_mask is not None and attention_mask.dim() == 3:
            attention_mask = attention_mask[:, None]
        if cache is not None and cache_rows is None:
            cache_rows = torch.arange(b, device=input_ids.device)
        x = t["wte"](input_ids) if inputs_embeds is None else inputs_embeds
        rope = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, x.dtype)
        for i, block in enumerate(t["blocks"]):
            x = block(x, rope, attention_mask, cache, i, cache_rows, store_cache)
        if logits_index is not None:
            x = torch.gather(x, 1, logits_index[..., None].expand(-1, -1, x.shape[-1]))
        x = t["ln_f"](x)
        head = t["wte"].weight if self.config.weight_tying else t["ff_out"].weight
        return ModelOutput(logits=F.linear(x, head))
