"""A fixed computation grid (docs/adr/034-fixed-grid.md): the matrix products and the
attention of a row are computed in shapes that depend only on that row, so its numbers
do not depend on its neighbours, on padding or on the batch size.

Measured on CPU (MKL, 1 to 16 threads): a linear's output row is the same bits whatever
the number of rows M once M >= ROWS (fewer rows take kernels that reduce in another
order) and the reduction depth K <= DEPTH (deeper, MKL may split the reduction between
threads when the rows are few). So `linear` pads to ROWS rows and accumulates
DEPTH-deep products into its output in a fixed order. Attention
(`scaled_dot_product_attention` without a mask) gives each batch row the same bits as
alone: `attend_rows` runs it once per group of rows whose caches are equally long, never
over left padding, whose masked keys would move the row's real keys to other offsets of
the kernel's reduction.

The causal encoder's attention (`causal_blocks`) runs per query block of BLOCK absolute
positions, each over keys whose range depends only on the block's place: a prompt's
whole blocks get the same keys/values whether the prompt is encoded whole or after its
prefix's keys/values came from a cache (dinfer_engine/encoder_prefix.py), in one forward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROWS = 16
DEPTH = 512
BLOCK = 32


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T over the last dimension of x, on the fixed grid."""
    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    if rows < ROWS:
        flat = F.pad(flat, (0, 0, 0, ROWS - rows))
    out = F.linear(flat[:, :DEPTH], weight[:, :DEPTH])
    for start in range(DEPTH, flat.shape[1], DEPTH):  # accumulated in place, in order
        out.addmm_(flat[:, start:start + DEPTH], weight[:, start:start + DEPTH].t())
    return out[:rows].reshape(*x.shape[:-1], weight.shape[0])


class GridLinear(nn.Linear):
    """nn.Linear (no bias) on the fixed grid; the same parameter names."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)


def adopt(module: nn.Module) -> None:
    """Turn every bias-free nn.Linear under `module` into a GridLinear holding the same
    weight (parameter names and checkpoint loading are unchanged)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.bias is None:
                grid = GridLinear(child.in_features, child.out_features, bias=False,
                                  device=child.weight.device, dtype=child.weight.dtype)
                grid.weight = child.weight
                setattr(parent, name, grid)


Group = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]  # rows (None: all), k, v


def groups(caches: list[list[tuple[torch.Tensor, torch.Tensor]]], layer: int) -> list[Group]:
    """Layer `layer` of every row's cache, rows with equally long caches stacked together
    (keys and values [B_g, H_kv, T_g, D]), in order of first appearance."""
    by_length: dict[int, list[int]] = {}
    for row, cache in enumerate(caches):
        by_length.setdefault(cache[layer][0].shape[2], []).append(row)
    device = caches[0][layer][0].device
    out: list[Group] = []
    for rows in by_length.values():
        index = None if len(rows) == len(caches) else torch.tensor(rows, device=device)
        out.append((index, torch.cat([caches[r][layer][0] for r in rows]),
                    torch.cat([caches[r][layer][1] for r in rows])))
    return out


def attend_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached: list[Group]
                ) -> torch.Tensor:
    """Bidirectional attention of q [B, H, L, D] over each row's cache followed by its own
    k, v [B, H_kv, L, D]; GQA inside the kernel, no mask. Returns [B, H, L, D]."""
    gqa = q.shape[1] != k.shape[1]
    if len(cached) == 1 and cached[0][0] is None:
        _, keys, values = cached[0]
        return F.scaled_dot_product_attention(q, torch.cat([keys, k], dim=2),
                                              torch.cat([values, v], dim=2), scale=1.0,
                                              enable_gqa=gqa)
    out = torch.empty_like(q)
    for rows, keys, values in cached:
        out[rows] = F.scaled_dot_product_attention(
            q[rows], torch.cat([keys, k[rows]], dim=2), torch.cat([values, v[rows]], dim=2),
            scale=1.0, enable_gqa=gqa)
    return out


def causal_blocks(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int,
                  window: int | None) -> torch.Tensor:
    """Causal attention of new queries q [1, H, S, D] at positions start.. over keys and
    values [1, H_kv, T, D] that end with theirs (the first at position start + S - T),
    one query block of BLOCK absolute positions at a time; a block's keys start at the
    first key or, under a sliding `window`, at its block start - window + 1 if later.
    Returns [1, H, S, D]."""
    end, first = start + q.shape[2], start + q.shape[2] - keys.shape[2]
    gqa = q.shape[1] != keys.shape[1]
    out, low = [], start
    while low < end:
        block = low // BLOCK * BLOCK
        high = min(end, block + BLOCK)
        since = first if window is None else max(first, block - window + 1)
        query = torch.arange(low, high, device=q.device)[:, None]
        key = torch.arange(since, high, device=q.device)[None]
        mask = key <= query
        if window is not None:
            mask &= key > query - window
        out.append(F.scaled_dot_product_attention(
            q[:, :, low - start:high - start], keys[:, :, since - first:high - first],
            values[:, :, since - first:high - first], attn_mask=mask, scale=1.0,
            enable_gqa=gqa))
        low = high
    return torch.cat(out, dim=2)
