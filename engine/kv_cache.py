"""Key/value cache for block diffusion decoding (Fast-dLLM semantics, see Engine docs).

The cache holds, per layer, rotated keys and values for every column of the running
batch: tensors [B, H_kv, L, D]. A *store* forward (the full-sequence refresh at a block
start) writes rows of it; a *read* forward computes only a span of columns and attends to
the cached columns concatenated with its own fresh keys; the caller's attention mask says
which cached columns stand in for which positions.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def empty(self) -> bool:
        return self.keys[0] is None

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> None:
        """Write fresh keys/values of full rows `rows` (k/v: [len(rows), H_kv, L, D])."""
        if self.keys[layer] is None or self.keys[layer].shape[2] != k.shape[2]:
            raise ValueError("cache columns differ from the stored rows; resize it first")
        self.keys[layer][rows] = k
        self.values[layer][rows] = v

    def read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached columns of `rows` followed by the fresh span: [n, H_kv, L + S, D]."""
        return (
            torch.cat([self.keys[layer][rows], k], dim=2),
            torch.cat([self.values[layer][rows], v], dim=2),
        )

    def allocate(self, like: torch.Tensor, batch: int, columns: int) -> None:
        """(Re)allocate zeroed storage for `batch` rows of `columns` columns."""
        shape = (batch, like.shape[1], columns, like.shape[3])
        for i in range(len(self.keys)):
            self.keys[i] = like.new_zeros(shape)
            self.values[i] = like.new_zeros(shape)

    def reshape_rows(self, keep: torch.Tensor, new_rows: int, pad_left: int) -> None:
        """Keep rows `keep` (in order), append `new_rows` zero rows, prepend `pad_left`
        zero columns (negative: drop that many leading columns)."""
        if self.empty:
            return
        for store in (self.keys, self.values):
            for i, t in enumerate(store):
                t = t[keep]
                if pad_left > 0:
                    t = torch.cat([t.new_zeros(*t.shape[:2], pad_left, t.shape[3]), t], dim=2)
                elif pad_left < 0:
                    t = t[:, :, -pad_left:]
                if new_rows:
                    t = torch.cat([t, t.new_zeros(new_rows, *t.shape[1:])], dim=0)
                store[i] = t
