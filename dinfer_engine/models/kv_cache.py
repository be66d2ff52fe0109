"""Key/value cache for block diffusion decoding, attended to where it lies (ADR 014; what
is stale and when: dinfer_engine/forwards/forward.py).

Per layer, rotated keys and values in tensors [slots, H_kv, columns + reserve, D],
allocated on the first write. A row of the running batch owns one *slot* for its life
(RunningBatch.slot: rows joining take freed slots, nothing moves when rows leave), and
its columns are right-aligned: the batch's width W maps to the cache's last W row
columns, so the width can shrink as rows leave without a copy. The `reserve` columns
after them hold the fresh span of a *read* forward, so that a forward's keys are one
strided view [slots lo..hi, columns ... reserve] that attention reads in place
(dinfer_engine/models/forward_inputs.py plans which views a forward attends to).

Three writes: `store` (a full-row forward's keys/values, right-aligned to the width),
`write` (block diffusion: a span into its own columns, dinfer_engine/forwards/block_forward.py)
and `put_fresh` (a read forward's span into the reserve). Only `resize` copies the cache:
when the slots or columns must grow, or to compact a batch that has shrunk to a few of
its slots.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int, reserve: int = 0) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.rows = 0  # slots
        self.columns = 0  # row columns (the widest batch since the last resize)
        self.width = 0  # the running batch's width: its columns are the last `width`
        self.reserve = reserve  # columns after the row columns, for a read forward's span

    @property
    def offset(self) -> int:
        """Cache column of the batch's column 0."""
        return self.columns - self.width

    def layer(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s keys and values, allocated (zeros) on first use in the shape
        and dtype of `like` [n, H_kv, S, D]."""
        keys, values = self.keys[layer], self.values[layer]
        if keys is None or values is None:
            shape = (self.rows, like.shape[1], self.columns + self.reserve, like.shape[3])
            keys, values = like.new_zeros(shape), like.new_zeros(shape)
            self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> None:
        """Write the keys/values [len(rows), H_kv, S, D] of the last S columns of slots
        `rows` (a full forward: every column from the first any of its rows needs)."""
        if k.shape[2] > self.width:
            raise ValueError(f"storing {k.shape[2]} columns into a batch of {self.width}")
        keys, values = self.layer(layer, k)
        end = self.columns
        keys[rows, :, end - k.shape[2]:end] = k
        values[rows, :, end - k.shape[2]:end] = v

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
              columns: torch.Tensor) -> None:
        """Write the span k/v [n, H_kv, S, D] of slots `rows` into the batch's columns
        `columns` [n, S]; entries whose column is -1 are not written (already cached, or
        filler)."""
        keys, values = self.layer(layer, k)
        ok = columns >= 0
        row_index = rows[:, None].expand_as(columns)[ok]
        column_index = columns[ok] + self.offset
        keys[row_index, :, column_index] = k.transpose(1, 2)[ok]
        values[row_index, :, column_index] = v.transpose(1, 2)[ok]

    def put_fresh(self, layer: int, k: torch.Tensor, v: torch.Tensor,
                  rows: torch.Tensor) -> None:
        """Write a read forward's span k/v [n, H_kv, S, D] into the reserve of slots
        `rows`, right after their row columns (grown first if S exceeds it)."""
        if k.shape[2] > self.reserve:
            self.resize(torch.arange(self.rows, device=k.device), 0, self.width,
                        reserve=k.shape[2])
        keys, values = self.layer(layer, k)
        keys[rows, :, self.columns:self.columns + k.shape[2]] = k
        values[rows, :, self.columns:self.columns + k.shape[2]] = v

    def view(self, layer: int, lo: int, hi: int, first: int,
             end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of slots lo..hi-1 from the batch's column `first` to `end`
        (past the width: into the reserve), as views."""
        keys, values = self.keys[layer], self.values[layer]
        if keys is None or values is None:
            raise RuntimeError(f"layer {layer} of the KV cache read before any write")
        columns = slice(self.offset + first, self.offset + end)
        return keys[lo:hi, :, columns], values[lo:hi, :, columns]

    def fit(self, slots: int, width: int) -> None:
        """Make room for `slots` slots and a batch `width` columns wide (copies only to
        grow); the batch's columns become the last `width`."""
        if slots > self.rows or width > self.columns:
            keep = torch.arange(self.rows, device=self._device())
            self.resize(keep, max(0, slots - self.rows), max(width, self.columns))
        self.width = width

    def resize(self, keep: torch.Tensor, new_rows: int, columns: int,
               reserve: int | None = None) -> None:
        """Keep slots `keep` (in order), append `new_rows` zero slots, and change the row
        columns to `columns` by adding or dropping columns on the left (rows are
        right-aligned); the batch's width becomes `columns`. A copy of the cache."""
        reserve = self.reserve if reserve is None else reserve
        shift = columns - self.columns
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is None:
                    continue
                t = t[keep]
                rows, tail = t[:, :, :self.columns], t[:, :, self.columns:][:, :, :reserve]
                if shift > 0:
                    rows = torch.cat([rows.new_zeros(*rows.shape[:2], shift, rows.shape[3]),
                                      rows], dim=2)
                elif shift < 0:
                    rows = rows[:, :, -shift:]
                missing = reserve - tail.shape[2]
                tail = torch.cat([tail, tail.new_zeros(*tail.shape[:2], missing, tail.shape[3])],
                                 dim=2)
                t = torch.cat([rows, tail], dim=2)
                store[i] = torch.cat([t, t.new_zeros(new_rows, *t.shape[1:])], dim=0)
        self.rows = len(keep) + new_rows
        self.columns = self.width = columns
        self.reserve = reserve

    def _device(self) -> torch.device:
        t = self.keys[0]
        return t.device if t is not None else torch.device("cpu")
