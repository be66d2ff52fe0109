"""Key/value cache for block diffusion decoding (what is stale and when:
engine/forwards/forward.py).

The cache holds, per layer, rotated keys and values for every column of the running
batch: tensors [rows, H_kv, columns, D], allocated on the first store. A *store* forward
(the full-row refresh at a block start) writes rows of it; a *read* forward computes only
a span of columns and attends to the cached columns followed by its own fresh keys; the
caller's attention mask says which cached columns are usable. A *write* forward (block
diffusion, engine/forwards/block_forward.py) computes a span, writes its keys/values into
their own columns, and attends to the whole cached row; the block-causal mask says what
is visible.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.rows = 0
        self.columns = 0

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> None:
        """Write fresh keys/values of full rows `rows` (k/v: [len(rows), H_kv, columns, D])."""
        if k.shape[2] != self.columns:
            raise ValueError(f"storing {k.shape[2]} columns into a cache of {self.columns}")
        if self.keys[layer] is None:
            shape = (self.rows, k.shape[1], self.columns, k.shape[3])
            self.keys[layer], self.values[layer] = k.new_zeros(shape), v.new_zeros(shape)
        self.keys[layer][rows] = k
        self.values[layer][rows] = v

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
              columns: torch.Tensor) -> None:
        """Write the span k/v [n, H_kv, S, D] of rows `rows` into columns `columns` [n, S];
        entries whose column is -1 are not written (columns already cached, or filler)."""
        if self.keys[layer] is None:
            shape = (self.rows, k.shape[1], self.columns, k.shape[3])
            self.keys[layer], self.values[layer] = k.new_zeros(shape), v.new_zeros(shape)
        ok = columns >= 0
        row_index = rows[:, None].expand_as(columns)[ok]
        self.keys[layer][row_index, :, columns[ok]] = k.transpose(1, 2)[ok]
        self.values[layer][row_index, :, columns[ok]] = v.transpose(1, 2)[ok]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
               store: bool, columns: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys/values a forward attends to: with `columns`, write the span there and
        return the whole cached rows; with `store`, keep full rows and return them; else
        the cached columns followed by the fresh span (read)."""
        if columns is not None:
            self.write(layer, k, v, rows, columns)
            return self.keys[layer][rows], self.values[layer][rows]
        if store:
            self.store(layer, k, v, rows)
            return k, v
        return self.read(layer, k, v, rows)

    def read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached columns of `rows` followed by the fresh span: [n, H_kv, columns + S, D]."""
        return (
            torch.cat([self.keys[layer][rows], k], dim=2),
            torch.cat([self.values[layer][rows], v], dim=2),
        )

    def resize(self, keep: torch.Tensor, new_rows: int, columns: int) -> None:
        """Keep rows `keep` (in order), append `new_rows` zero rows, and change the width to
        `columns` by adding or dropping columns on the left (rows are left-padded)."""
        shift = columns - self.columns
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                if t is None:
                    continue
                t = t[keep]
                if shift > 0:
                    t = torch.cat([t.new_zeros(*t.shape[:2], shift, t.shape[3]), t], dim=2)
                elif shift < 0:
                    t = t[:, :, -shift:]
                store[i] = torch.cat([t, t.new_zeros(new_rows, *t.shape[1:])], dim=0)
        self.rows = len(keep) + new_rows
        self.columns = columns
