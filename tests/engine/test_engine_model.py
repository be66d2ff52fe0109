"""The LLaDA forward against a plain einsum reference, and the KV cache against no cache."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dinfer_engine import Engine
from dinfer_engine.models.kv_cache import KVCache


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Half-split rotary embedding of x [L, H, D] at positions 0..L-1."""
    length, dim = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.arange(length).float()[:, None] * inv_freq
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def reference_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """LLaDA's forward written out for one sequence ids [L]: no cache, no masks."""
    cfg, w = model.config, {k.removeprefix("model.transformer."): v
                            for k, v in model.state_dict().items()}
    heads, kv_heads, dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    x = w["wte.weight"][ids]
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"], cfg.rms_norm_eps)
        q = rotate((h @ w[p + "q_proj.weight"].T).view(-1, heads, dim), cfg.rope_theta)
        k = rotate((h @ w[p + "k_proj.weight"].T).view(-1, kv_heads, dim), cfg.rope_theta)
        v = (h @ w[p + "v_proj.weight"].T).view(-1, kv_heads, dim)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / dim**0.5
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(len(ids), -1)
        x = x + attn @ w[p + "attn_out.weight"].T
        h = rms_norm(x, w[p + "ff_norm.weight"], cfg.rms_norm_eps)
        gate, up = h @ w[p + "ff_proj.weight"].T, h @ w[p + "up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "ff_out.weight"].T
    x = rms_norm(x, w["ln_f.weight"], cfg.rms_norm_eps)
    return x @ w["ff_out.weight"].T


def test_logits_match_reference_forward(tiny_engine: Engine):
    ids = torch.tensor([5, 9, 3, 3, 3, 17, 3, 22])
    got = tiny_engine.model(ids[None]).logits[0]
    torch.testing.assert_close(got, reference_logits(tiny_engine.model, ids),
                               rtol=1e-4, atol=1e-4)


def test_left_padding_with_offset_positions_equals_unpadded(tiny_engine: Engine):
    model, ids = tiny_engine.model, torch.tensor([[5, 9, 3, 3, 17]])
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    positions = (torch.arange(8) - 3).clamp(min=0)[None]
    keys = torch.arange(8)[None] >= 3
    out = model(padded, position_ids=positions, attention_mask=keys).logits[:, 3:]
    torch.testing.assert_close(out, model(ids).logits, rtol=1e-5, atol=1e-5)


def test_logits_index_selects_positions(tiny_engine: Engine):
    ids = torch.tensor([[5, 9, 3, 3, 17, 3]])
    index = torch.tensor([[2, 3, 5]])
    torch.testing.assert_close(tiny_engine.model(ids, logits_index=index).logits,
                               tiny_engine.model(ids).logits[:, [2, 3, 5]])


def test_cache_read_of_unchanged_tokens_equals_full_forward(tiny_engine: Engine):
    """Right after a store, a span forward over cached columns is exact: prefix-style (span
    to the end) and dual-style (span in the middle), for a chosen subset of rows."""
    model = tiny_engine.model
    ids = torch.randint(5, 40, (3, 10), generator=torch.Generator().manual_seed(1))
    full = model(ids).logits
    cache = KVCache(model.config.n_layers)
    cache.resize(torch.arange(0), 3, 10)
    model(ids, cache=cache, store_cache=True)
    rows = torch.tensor([0, 2])
    for start, end in ((6, 10), (4, 7)):
        keys = torch.ones(2, 10 + end - start, dtype=torch.bool)
        keys[:, start:end] = False  # the cached copies of the recomputed columns
        out = model(ids[rows, start:end], position_ids=torch.arange(start, end).expand(2, -1),
                    attention_mask=keys, cache=cache, cache_rows=rows).logits
        torch.testing.assert_close(out, full[rows, start:end], rtol=1e-5, atol=1e-5)
