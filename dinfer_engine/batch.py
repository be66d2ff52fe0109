"""The running batch: sequences decoded together, left-padded to one width.

Row i holds `pad[i]` padding columns, its prompt, then its region of `region[i]` columns:
what the run's canvas (dinfer_engine/canvas/) says the answer starts as (gen_length masks, an
infill canvas), right-aligned so that the regions end together. Blocks of block_length
count from `origin[i]` (the prompt's end, or on block diffusion's absolute grid the first
prompt token); `block[i]` is the current one and `end_block[i]` one past the last, both
set by the canvas. Padding is invisible:
positions count from the first real token and padding columns are masked out as keys
(dinfer_engine/forwards/forward.py), so a row decodes exactly as it would alone. Rows join and
leave between iterations; the width follows the longest prompt present. Each row owns a
KV cache slot (`slot`) for its life: joining rows take the slots of rows that left, and
neither leaving rows nor a shrinking width move the cache (dinfer_engine/models/kv_cache.py).
Strategies and canvases keep per-row state (a decoder's credit, smoothing's soft
embeddings, which rows are infill rows) in `state`: tensors whose first dimension is the
row, registered with `add_state`, zero for joining rows and dropped with leaving ones, so
no row ever sees another's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from dinfer_engine.cache_scope import CacheScope
from dinfer_engine.models.kv_cache import KVCache
from dinfer_engine.sampling_controls import NEUTRAL, SamplingControls

if TYPE_CHECKING:
    from dinfer_engine.constraints.grammar import Grammar


@dataclass
class Request:
    """One row to decode, as the engine planned it from a caller's request
    (dinfer_engine/request.py): plain data, sent to tensor-parallel ranks as it is.
    Its generator is made by the loop as the row joins (`start`)."""

    index: int
    prompt: list[int]
    seed: int | None  # of the row's noise (None: 0 where the loop samples)
    started: float = 0.0
    # an infill row's region after the prompt: given tokens and mask_id at the masked
    # spans, decoded in place (dinfer_engine/infill.py); None: gen_length masks
    canvas: list[int] | None = None
    constraint: Grammar | None = None  # what the answer must match (structured output)
    scope: CacheScope = CacheScope()  # whose cached prompt blocks it may reuse
    controls: SamplingControls = NEUTRAL  # logit bias, penalties, min_p, EOS bans
    # None: greedy decoding draws no noise
    generator: torch.Generator | None = field(default=None, init=False, repr=False,
                                              compare=False)

    def start(self, device: torch.device, sampled: bool) -> None:
        """The row joins a run: its clock starts, and where the loop samples its generator
        is seeded with its seed."""
        self.started = time.perf_counter()
        self.generator = None if not sampled else \
            torch.Generator(device).manual_seed(0 if self.seed is None else self.seed)


@dataclass
class FinishedRow:
    request: Request
    answer: list[int]
    nfe: int
    seconds: float
    logprobs: list[float] | None = None  # per answer position, when asked for
    top_logprobs: list[list[tuple[int, float]]] | None = None
    counters: dict[str, int] = field(default_factory=dict)  # a strategy's reported counts


class Logprobs:
    """Each answer position's log-probability at the iteration that committed it, and
    the `top` most likely tokens there (token id, log-probability), for rows [B]. A block
    may start before the answer or end after it (block diffusion's absolute grid), so
    one block's margin is kept on each side."""

    def __init__(self, rows: int, gen_length: int, margin: int, top: int,
                 device: torch.device) -> None:
        self.gen_length, self.margin, self.top = gen_length, margin, top
        width = gen_length + 2 * margin
        self.chosen = torch.full((rows, width), torch.nan, dtype=torch.float64, device=device)
        self.top_ids = torch.zeros(rows, width, top, dtype=torch.long, device=device)
        self.top_values = torch.zeros(rows, width, top, dtype=torch.float64, device=device)

    def record(self, answer_columns: torch.Tensor, commit: torch.Tensor,
               chosen: torch.Tensor, top_ids: torch.Tensor | None,
               top_values: torch.Tensor | None) -> None:
        """Write the committed positions' values ([B, S] / [B, S, top]) at their columns
        [B, S] counted from the answer's first token."""
        answer_columns = answer_columns + self.margin
        old = self.chosen.gather(1, answer_columns)
        self.chosen.scatter_(1, answer_columns, torch.where(commit, chosen, old))
        if self.top:
            index = answer_columns[..., None].expand(-1, -1, self.top)
            assert top_ids is not None and top_values is not None, "top alternatives"
            for store, new in ((self.top_ids, top_ids), (self.top_values, top_values)):
                if new is None:
                    raise ValueError("top log-probabilities were asked for but not given")
                store.scatter_(1, index, torch.where(commit[..., None], new,
                                                     store.gather(1, index)))

    def rows(self, keep: torch.Tensor) -> Logprobs:
        kept = Logprobs(0, self.gen_length, self.margin, self.top, self.chosen.device)
        kept.chosen, kept.top_ids, kept.top_values = (
            self.chosen[keep], self.top_ids[keep], self.top_values[keep])
        return kept

    def extend(self, rows: int) -> None:
        more = Logprobs(rows, self.gen_length, self.margin, self.top, self.chosen.device)
        self.chosen = torch.cat([self.chosen, more.chosen])
        self.top_ids = torch.cat([self.top_ids, more.top_ids])
        self.top_values = torch.cat([self.top_values, more.top_values])

    def row(self, i: int, length: int) -> tuple[list[float], list[list[tuple[int, float]]]]:
        answer = slice(self.margin, self.margin + length)
        ids, values = self.top_ids[i, answer].tolist(), self.top_values[i, answer].tolist()
        return self.chosen[i, answer].tolist(), [list(zip(a, b, strict=True))
                                                 for a, b in zip(ids, values, strict=True)]


class SharedPrefix(Protocol):
    """Prompt blocks shared across rows (dinfer_engine.prefix_cache.PrefixCache, which sits
    above the batch it reads)."""

    def first_forwards(self, batch: RunningBatch) -> dict[int, list[bytes]]: ...

    def leaders(self, batch: RunningBatch, chains: dict[int, list[bytes]]
                ) -> Iterator[list[int]]: ...

    def keep(self, batch: RunningBatch, row: int, chain: list[bytes]) -> None: ...


class Canvas(Protocol):
    """What the rows' regions start as and where their blocks lie: the run's canvas
    (dinfer_engine/canvas/masked.py, which sits above the batch it reads)."""

    def region(self, request: Request) -> list[int]: ...

    def row_length(self, request: Request) -> int: ...

    def blocks(self, prompt: torch.Tensor, region: torch.Tensor, length: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def joined(self, batch: RunningBatch, requests: list[Request]) -> None: ...

    def scheduled(self, batch: RunningBatch, masked: torch.Tensor, counts: torch.Tensor
                  ) -> torch.Tensor: ...


@dataclass(frozen=True)
class Layout:
    """What every row of a running batch shares. gen_length: the columns of a row's
    answer region (the config's canvas_length: whole blocks, ADR 059). top_logprobs: None
    unless log-probabilities were asked for (with top_logprobs alternatives).
    region_limit: the longest region any request has, so that per-position state covers
    every row's."""

    gen_length: int
    block_length: int
    mask_id: int
    pad_id: int
    device: torch.device
    top_logprobs: int | None = None
    region_limit: int = 0


class RunningBatch:
    def __init__(self, layout: Layout, cache: KVCache | None, canvas: Canvas) -> None:
        gen_length, block_length, device = layout.gen_length, layout.block_length, layout.device
        self.gen_length, self.block_length = gen_length, block_length
        self.region_limit = max(gen_length, layout.region_limit)
        self.canvas = canvas
        self.mask_id, self.pad_id = layout.mask_id, layout.pad_id
        self.device = device
        self.cache = cache
        self.prefix: SharedPrefix | None = None  # shared prompt blocks (block diffusion)
        self.requests: list[Request] = []
        self.ids = torch.empty(0, gen_length, dtype=torch.long, device=device)
        self.pad = torch.empty(0, dtype=torch.long, device=device)
        self.prompt_length = torch.empty(0, dtype=torch.long, device=device)
        self.region = torch.empty(0, dtype=torch.long, device=device)  # columns after it
        self.origin = torch.empty(0, dtype=torch.long, device=device)  # position of block 0
        self.block = torch.empty(0, dtype=torch.long, device=device)  # current block index
        self.end_block = torch.empty(0, dtype=torch.long, device=device)  # one past the last
        self.step = torch.empty(0, dtype=torch.long, device=device)  # iteration within it
        self.nfe = torch.empty(0, dtype=torch.long, device=device)
        self.cached = torch.empty(0, dtype=torch.long, device=device)  # positions in the cache
        self.slot = torch.empty(0, dtype=torch.long, device=device)  # the row's cache slot
        self.logprobs = (None if layout.top_logprobs is None
                         else Logprobs(0, self.region_limit, block_length,
                                       layout.top_logprobs, device))
        self.state: dict[str, torch.Tensor] = {}
        self.reported: list[str] = []  # per-row counts a finished row carries

    def add_state(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                  report: bool = False) -> None:
        """Register per-row state `name` of `shape` per row (before any row joins);
        `report`: a count (shape ()) that the finished row carries in `counters`."""
        self.state[name] = torch.zeros(self.size, *shape, dtype=dtype, device=self.device)
        if report:
            self.reported.append(name)

    @property
    def size(self) -> int:
        return len(self.requests)

    @property
    def width(self) -> int:
        return self.ids.shape[1]

    def block_columns(self) -> torch.Tensor:
        """[B, block_length] column indices of each row's current block. A block that would
        run past the row's end (an infill canvas's last, partial block) is moved left to
        end with the row: the columns it then takes from the block before hold no masks."""
        start = self.pad + self.origin + self.block * self.block_length
        start = start.clamp(max=self.width - self.block_length)
        return start[:, None] + torch.arange(self.block_length, device=self.device)

    def positions(self, columns: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return (columns - self.pad[rows, None]).clamp(min=0)

    def answer_columns(self) -> torch.Tensor:
        """[B, gen_length] columns of the ordinary rows' answers (an infill row's columns
        are clipped to its row: its region is `region` long)."""
        start = self.pad + self.prompt_length
        columns = start[:, None] + torch.arange(self.gen_length, device=self.device)
        return columns.clamp(max=self.width - 1)

    def done(self) -> torch.Tensor:
        """Rows whose every block is decoded."""
        return self.block >= self.end_block

    def add(self, requests: list[Request]) -> None:
        if not requests:
            return
        regions = [self.canvas.region(r) for r in requests]
        lengths = [self.canvas.row_length(r) for r in requests]
        width = max(self.width if self.size else 0, *lengths, self.block_length)
        self._reshape(width)
        rows = torch.full((len(requests), width), self.mask_id, dtype=torch.long)
        for row, request, tokens, row_length in zip(rows, requests, regions, lengths,
                                                    strict=True):
            pad = width - row_length
            start = pad + len(request.prompt)
            row[:pad] = self.pad_id
            row[pad:start] = torch.tensor(request.prompt, dtype=torch.long)
            row[start:start + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        prompt = torch.tensor([len(r.prompt) for r in requests], device=self.device)
        region = torch.tensor([len(r) for r in regions], device=self.device)
        length = torch.tensor(lengths, device=self.device)
        origin, first, end = self.canvas.blocks(prompt, region, length)
        zeros = torch.zeros_like(prompt)
        self.ids = torch.cat([self.ids, rows.to(self.device)])
        for name, value in (("pad", width - length), ("prompt_length", prompt),
                            ("region", region), ("origin", origin),
                            ("block", first), ("end_block", end), ("step", zeros),
                            ("nfe", zeros), ("cached", zeros),
                            ("slot", self._free_slots(len(requests)))):
            setattr(self, name, torch.cat([getattr(self, name), value]))
        for name, tensor in self.state.items():
            fresh = tensor.new_zeros(len(requests), *tensor.shape[1:])
            self.state[name] = torch.cat([tensor, fresh])
        if self.logprobs is not None:
            self.logprobs.extend(len(requests))
        self.requests += requests
        self.canvas.joined(self, requests)

    def remove(self, leaving: torch.Tensor) -> list[FinishedRow]:
        """Take the rows flagged in `leaving` [B] out of the batch and return them."""
        now = time.perf_counter()
        flags = leaving.tolist()
        nfe, start = self.nfe.tolist(), (self.pad + self.prompt_length).tolist()
        region = self.region.tolist()
        counts = {name: self.state[name].tolist() for name in self.reported}
        leaving_rows = [i for i, flag in enumerate(flags) if flag]
        finished = [FinishedRow(self.requests[i],
                                self.ids[i, start[i]:start[i] + region[i]].tolist(), nfe[i],
                                now - self.requests[i].started,
                                counters={name: int(c[i]) for name, c in counts.items()})
                    for i in leaving_rows]
        if self.logprobs is not None:
            for row, i in zip(finished, leaving_rows, strict=True):
                row.logprobs, row.top_logprobs = self.logprobs.row(i, region[i])
        keep = (~leaving).nonzero().squeeze(1)
        if self.logprobs is not None:
            self.logprobs = self.logprobs.rows(keep)
        self.requests = [r for i, r in enumerate(self.requests) if not flags[i]]
        for name in ("ids", "pad", "prompt_length", "region", "origin", "block",
                     "end_block", "step", "nfe", "cached", "slot"):
            setattr(self, name, getattr(self, name)[keep])
        self.state = {name: tensor[keep] for name, tensor in self.state.items()}
        width = self.width - int(self.pad.min()) if self.size else self.width
        self._reshape(max(width, self.block_length))
        return finished

    def _free_slots(self, count: int) -> torch.Tensor:
        """Cache slots for `count` joining rows: the lowest free ones, the cache growing
        when there are too few."""
        if self.cache is None:
            return torch.arange(self.size, self.size + count, device=self.device)
        taken = set(self.slot.tolist())
        free = [i for i in range(self.cache.rows) if i not in taken][:count]
        grown = count - len(free)
        free += range(self.cache.rows, self.cache.rows + grown)
        self.cache.fit(self.cache.rows + grown, self.width)
        return torch.tensor(free, dtype=torch.long, device=self.device)

    def _reshape(self, width: int) -> None:
        """Change the width of the rows by adding or dropping padding columns on the left;
        the cache takes the new width (copied only to grow past its columns)."""
        shift = width - self.width
        if shift > 0:
            fill = self.ids.new_full((self.size, shift), self.pad_id)
            self.ids = torch.cat([fill, self.ids], dim=1)
        elif shift < 0:
            self.ids = self.ids[:, -shift:]
        self.pad = self.pad + shift
        if self.cache is not None:
            self.cache.fit(self.cache.rows, width)
