"""What every layer of one forward shares, built once per forward (ADR 014): the rotary
tables, the attention masks as additive float tensors, and, with a KV cache, how the
forward's keys/values go into the cache and which views of it attention reads.

A forward's rows sit in cache slots that need not be adjacent (rows at a block start run
in another forward). Attention reads the cache where it lies: the forward's slots, in
slot order, are cut into *segments* of slots lo..hi-1; a segment is one SDPA call over
the strided view of those slots, with zero queries (outputs dropped) for the slots in
it that belong to no row of this forward. Runs of member slots separated by at most
MAX_GAP other slots share a segment: a dummy slot costs one span of queries against its
row (a slot at a block start costs ~span / width of its own full forward), a segment
one more call. Each segment's view starts at the first column any of its rows may see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch
import torch.nn.functional as F

from dinfer_engine.models.kv_cache import KVCache

MAX_GAP = 2  # slots of no row of the forward inside one segment before it is cut


class CacheMode(Enum):
    STORE = "store"  # full rows: keep their keys/values, attend to them as computed
    READ = "read"  # a span: attend to the cached columns followed by the fresh span
    WRITE = "write"  # a span written into its own columns: attend to the whole row


@dataclass(frozen=True)
class Segment:
    """Slots lo..hi-1 attended in one call; rows `rows` [m] of the forward (None: rows
    first..first+m-1 in order, filling the segment) sit at slots lo + `local` [m]."""

    lo: int
    hi: int
    rows: torch.Tensor | None
    local: torch.Tensor | None
    first: int  # the forward's first row when `rows` is None
    key_start: int  # the batch column the view starts at
    key_end: int  # one past its last column (past the width: into the reserve)
    mask: torch.Tensor  # additive float [hi - lo, 1, S or 1, key_end - key_start]


@dataclass(frozen=True)
class ForwardInputs:
    """rope: cos/sin [B, 1, S, rotary_dim]. mask: additive float mask broadcastable to
    [B, H, S, keys] for attention over the forward's own keys (no cache, or STORE), or
    None. With a cache: `mode`, the rows' slots, the batch columns of a WRITE span
    ([B, S], -1: not written) and the segments of a READ or WRITE."""

    rope: tuple[torch.Tensor, torch.Tensor]
    mask: torch.Tensor | None = None
    cache: KVCache | None = None
    mode: CacheMode | None = None
    slots: torch.Tensor | None = None
    columns: torch.Tensor | None = None
    segments: tuple[Segment, ...] = ()
    grouped: dict[int, torch.Tensor] = field(default_factory=dict)

    def group_mask(self, key: int, mask: torch.Tensor, group: int) -> torch.Tensor:
        """`mask` with its query rows repeated `group` times (grouped-query attention as
        H_kv heads of group x S queries), made once per forward and mask."""
        if mask.shape[2] == 1 or group == 1:
            return mask
        if key not in self.grouped:
            self.grouped[key] = mask.repeat(1, 1, group, 1)
        return self.grouped[key]


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = may attend) as 0 / -inf in `dtype`, as SDPA would make it at
    every call; float masks pass through."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, -torch.inf)


def segments(cache: KVCache, mode: CacheMode, slots: torch.Tensor, mask: torch.Tensor,
             span: int, dtype: torch.dtype) -> tuple[Segment, ...]:
    """The views a READ or WRITE forward of rows at `slots` attends to; `mask` bool
    [n, 1, S or 1, keys] over the batch's width followed, for READ, by the span."""
    keys = cache.width + (span if mode is CacheMode.READ else 0)
    if mask.shape[-1] != keys:
        raise ValueError(f"a {mode.value} forward's mask covers {mask.shape[-1]} keys, "
                         f"expected {keys}")
    listed = slots.tolist()
    order = sorted(range(len(listed)), key=listed.__getitem__)
    ordered = [listed[i] for i in order]
    parts, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or ordered[i] - ordered[i - 1] > MAX_GAP + 1:
            parts.append(segment(order[start:i], ordered[start:i], mask, keys, dtype))
            start = i
    return tuple(parts)


def segment(rows: list[int], slots: list[int], mask: torch.Tensor, keys: int,
            dtype: torch.dtype) -> Segment:
    lo, hi = slots[0], slots[-1] + 1
    seen = mask[rows].flatten(0, -2).any(0)
    key_start = int(seen.to(torch.uint8).argmax()) if bool(seen.any()) else 0
    part = mask[rows][..., key_start:]
    if hi - lo == len(rows) and rows == list(range(rows[0], rows[0] + len(rows))):
        return Segment(lo, hi, None, None, rows[0], key_start, keys, additive(part, dtype))
    device = mask.device
    local = torch.tensor([s - lo for s in slots], device=device)
    full = torch.ones((hi - lo, *part.shape[1:]), dtype=torch.bool, device=device)
    full[local] = part
    return Segment(lo, hi, torch.tensor(rows, device=device), local, 0, key_start, keys,
                   additive(full, dtype))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           inputs: ForwardInputs, key: int) -> torch.Tensor:
    """Attention of q [B, H, S, D] over k/v [B, H_kv, L, D] with an additive mask, never
    expanding k/v for grouped heads: on CPU SDPA's own grouped-query path does not; on
    other devices (whose memory-efficient kernel has no grouped-query path with a mask)
    the heads run as H_kv heads of (H / H_kv) x S queries, the mask repeated for them
    once per forward."""
    group = q.shape[1] // k.shape[1]
    if group == 1 or q.device.type == "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=group > 1)
    if mask is not None:
        mask = inputs.group_mask(key, mask, group)
    return grouped_attention(q, k, v, mask)


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """Grouped-query attention as H_kv heads of (H / H_kv) x S queries: query heads
    h*g .. h*g+g-1 share key head h. A mask varying per query must already be repeated g
    times along the queries (ForwardInputs.group_mask)."""
    b, h, s, d = q.shape
    grouped = q.reshape(b, k.shape[1], h // k.shape[1] * s, d)
    return F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask).view(b, h, s, d)


def cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     inputs: ForwardInputs, layer: int) -> torch.Tensor:
    """Attention of one layer: q [B, H, S, D], this forward's rotated k/v [B, H_kv, S, D],
    passed through the cache as `inputs` says. Returns [B, H, S, D]."""
    cache, mode, slots = inputs.cache, inputs.mode, inputs.slots
    if cache is None or mode is None or mode is CacheMode.STORE or slots is None:
        if cache is not None and mode is CacheMode.STORE and slots is not None:
            cache.store(layer, k, v, slots)
        return attend(q, k, v, inputs.mask, inputs, -1)
    if mode is CacheMode.READ:
        cache.put_fresh(layer, k, v, slots)
    elif inputs.columns is not None:
        cache.write(layer, k, v, slots, inputs.columns)
    out: torch.Tensor | None = None
    for i, part in enumerate(inputs.segments):
        keys, values = cache.view(layer, part.lo, part.hi, part.key_start, part.key_end)
        if part.rows is None:
            queries = q[part.first:part.first + part.hi - part.lo]
        else:
            queries = q.new_zeros((part.hi - part.lo, *q.shape[1:]))
            queries[part.local] = q[part.rows]
        result = attend(queries, keys, values, part.mask, inputs, i)
        if part.rows is None and len(inputs.segments) == 1:
            return result
        if out is None:
            out = q.new_empty(q.shape)
        if part.rows is None:
            out[part.first:part.first + part.hi - part.lo] = result
        else:
            out[part.rows] = result[part.local]
    if out is None:
        raise ValueError("a cached forward with no rows")
    return out
