"""Identical requests inside one job run once. Two lines are identical when their rendered
prompt (or messages), their effective parameters and their seeds are the same; a greedy
request (temperature 0, the model's default included) does not depend on its seed, so its
seed is left out. The first such line runs; the later ones point at it (`duplicate_of`) and
get a copy of its result when it is written (`chunk_state.record`).

Memory: a request is known by a 128-bit digest of its canonical JSON, kept in an
open-addressing table of two flat 64-bit arrays sized once for the file's line count
(at most two thirds full): 64 bits of the digest pick the slot, the other 64 are stored
with the line and chunk. 24 bytes a line, allocated up front (a dict of digests took
about 130 per distinct line)."""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field
from typing import Any

from dinfer_batch.formats.fastjson import canonical
from dinfer_batch.formats.params import sample_seeds
from dinfer_batch.model_info import ModelInfo


@dataclass
class Duplicates:
    model: ModelInfo
    defaults: dict[str, Any]
    seed_base: int
    capacity: int  # the most lines the file can have
    _digests: array = field(init=False, repr=False)
    _firsts: array = field(init=False, repr=False)  # line << 32 | chunk; 0: empty slot

    def __post_init__(self) -> None:
        empty = bytes(8 * (self.capacity * 3 // 2 + 1))
        self._digests, self._firsts = array("Q", empty), array("Q", empty)

    def key(self, request: dict[str, Any], line: int) -> bytes:
        params = self.defaults | request["params"]
        seeds = (sample_seeds(params, self.seed_base, line)
                 if self.model.samples_randomly(params) else None)
        content = request.get("prompt", request.get("messages"))
        params = {k: v for k, v in params.items() if k != "seed"}
        text = canonical([content, params, seeds])
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def original(self, request: dict[str, Any], line: int, chunk: int) -> tuple[int, int] | None:
        """(line, chunk) of the first line with this request, or None when this is the first
        (then it is remembered with `chunk`, the chunk it will run in)."""
        key = self.key(request, line)
        size = len(self._firsts)
        slot, digest = int.from_bytes(key[:8]) % size, int.from_bytes(key[8:])
        while first := self._firsts[slot]:
            if self._digests[slot] == digest:
                return first >> 32, first & 0xFFFFFFFF
            slot = slot + 1 if slot + 1 < size else 0
        self._digests[slot], self._firsts[slot] = digest, line << 32 | chunk
        return None
