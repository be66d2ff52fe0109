"""The running batch: sequences decoded together, left-padded to one width.

Row i holds `pad[i]` padding columns, its prompt, then the gen_length answer columns, so
every row's answer occupies the same last gen_length columns. Padding is invisible:
positions count from the first real token and padding columns are masked out as keys
(engine/forward.py), so a row decodes exactly as it would alone. Rows join and leave
between iterations; the width follows the longest prompt present and the KV cache is
resized with the rows. Strategies keep per-row state (a decoder's credit, smoothing's
soft embeddings) in `state`: tensors whose first dimension is the row, registered with
`add_state`, zero for joining rows and dropped with leaving ones, so no row ever sees
another's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.kv_cache import KVCache


@dataclass
class Request:
    index: int
    prompt: list[int]
    generator: torch.Generator | None  # None: greedy decoding draws no noise
    started: float = 0.0


@dataclass
class FinishedRow:
    request: Request
    answer: list[int]
    nfe: int
    seconds: float


class RunningBatch:
    def __init__(self, gen_length: int, block_length: int, mask_id: int, pad_id: int,
                 device: torch.device, cache: KVCache | None) -> None:
        self.gen_length, self.block_length = gen_length, block_length
        self.mask_id, self.pad_id = mask_id, pad_id
        self.device = device
        self.cache = cache
        self.requests: list[Request] = []
        self.ids = torch.empty(0, gen_length, dtype=torch.long, device=device)
        self.pad = torch.empty(0, dtype=torch.long, device=device)
        self.block = torch.empty(0, dtype=torch.long, device=device)  # current block index
        self.step = torch.empty(0, dtype=torch.long, device=device)  # iteration within it
        self.nfe = torch.empty(0, dtype=torch.long, device=device)
        self.state: dict[str, torch.Tensor] = {}

    def add_state(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """Register per-row state `name` of `shape` per row (before any row joins)."""
        self.state[name] = torch.zeros(self.size, *shape, dtype=dtype, device=self.device)

    @property
    def size(self) -> int:
        return len(self.requests)

    @property
    def width(self) -> int:
        return self.ids.shape[1]

    def block_columns(self) -> torch.Tensor:
        """[B, block_length] column indices of each row's current block."""
        start = self.width - self.gen_length + self.block * self.block_length
        return start[:, None] + torch.arange(self.block_length, device=self.device)

    def positions(self, columns: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return (columns - self.pad[rows, None]).clamp(min=0)

    def answers(self) -> torch.Tensor:
        return self.ids[:, -self.gen_length:]

    def add(self, requests: list[Request]) -> None:
        if not requests:
            return
        longest = max(len(r.prompt) for r in requests) + self.gen_length
        width = max(self.width, longest) if self.size else longest
        self._reshape(torch.arange(self.size, device=self.device), width, len(requests))
        rows = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        for row, request in zip(rows, requests, strict=True):
            row[width - self.gen_length - len(request.prompt):width - self.gen_length] = (
                torch.tensor(request.prompt, dtype=torch.long))
            row[width - self.gen_length:] = self.mask_id
            request.started = time.perf_counter()
        pad = [width - self.gen_length - len(r.prompt) for r in requests]
        zeros = torch.zeros(len(requests), dtype=torch.long, device=self.device)
        self.ids = torch.cat([self.ids, rows.to(self.device)])
        self.pad = torch.cat([self.pad, torch.tensor(pad, device=self.device)])
        self.block = torch.cat([self.block, zeros])
        self.step = torch.cat([self.step, zeros])
        self.nfe = torch.cat([self.nfe, zeros])
        for name, tensor in self.state.items():
            fresh = tensor.new_zeros(len(requests), *tensor.shape[1:])
            self.state[name] = torch.cat([tensor, fresh])
        self.requests += requests

    def remove(self, leaving: torch.Tensor) -> list[FinishedRow]:
        """Take the rows flagged in `leaving` [B] out of the batch and return them."""
        now = time.perf_counter()
        flags = leaving.tolist()
        answers, nfe = self.answers().tolist(), self.nfe.tolist()
        finished = [FinishedRow(r, answers[i], nfe[i], now - r.started)
                    for i, r in enumerate(self.requests) if flags[i]]
        keep = (~leaving).nonzero().squeeze(1)
        self.requests = [r for i, r in enumerate(self.requests) if not flags[i]]
        for name in ("ids", "pad", "block", "step", "nfe"):
            setattr(self, name, getattr(self, name)[keep])
        self.state = {name: tensor[keep] for name, tensor in self.state.items()}
        width = self.width - int(self.pad.min()) if self.size else self.width
        self._reshape(keep, width, new_rows=0)
        return finished

    def _reshape(self, keep: torch.Tensor, width: int, new_rows: int) -> None:
        """Change the width of the kept rows by adding or dropping padding columns on the
        left; the cache keeps the same rows and makes room for `new_rows` more."""
        shift = width - self.width
        if shift > 0:
            fill = self.ids.new_full((self.size, shift), self.pad_id)
            self.ids = torch.cat([fill, self.ids], dim=1)
        elif shift < 0:
            self.ids = self.ids[:, -shift:]
        self.pad = self.pad + shift
        if self.cache is not None:
            self.cache.resize(keep, new_rows, width)
