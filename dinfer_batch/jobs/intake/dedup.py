"""Identical requests inside one job run once. Two lines are identical when their rendered
prompt (or messages), their effective parameters and their seeds are the same; a greedy
request (temperature 0, the model's default included) does not depend on its seed, so its
seed is left out. The first such line runs; the later ones point at it (`duplicate_of`) and
get a copy of its result when it is written (`chunk_state.record`).

A request is known by a 128-bit digest of its canonical JSON (`RequestKey`, computed where
the line is checked, possibly in another process); `Duplicates` remembers the first line
of each digest in an open-addressing table of two flat 64-bit arrays sized once for the
file's line count (at most two thirds full): 64 bits of the digest pick the slot, the
other 64 are stored with the line and chunk. 24 bytes a line, allocated up front (a dict
of digests took several times that: docs/adr/005-scale.md)."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from dinfer_batch.fastjson import canonical, loads
from dinfer_batch.formats.parameters.params import sample_seeds
from dinfer_batch.model_info import ModelInfo


@dataclass
class RequestKey:
    model: ModelInfo
    defaults: dict[str, Any]  # the job's parameters, under each line's own
    seed_base: int
    _samples_randomly: Callable[[str], bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # by the parameters' canonical text, which the key needs anyway: a million lines
        # resolve a handful of configurations (the seed does not change sampling)
        self._samples_randomly = lru_cache(maxsize=4096)(
            lambda params: self.model.samples_randomly(loads(params)))

    def __call__(self, request: dict[str, Any], line: int) -> bytes:
        params = self.defaults | request["params"]
        own_seed = params.pop("seed", None)
        shared = canonical(params)
        seeds = None
        if self._samples_randomly(shared):
            seeds = sample_seeds(params | {"seed": own_seed}, self.seed_base, line)
        digest = hashlib.blake2b(shared.encode(), digest_size=16)
        # all the request holds but its parameters: prompt(s) or messages, and an infill
        # line's suffix and spans, a Responses line's kept fields
        prompt = {name: value for name, value in request.items()
                  if name not in ("params", "spelt")}
        digest.update(canonical([prompt, seeds])
                      .encode())  # after a whole JSON object: no separator needed
        return digest.digest()


@dataclass
class Duplicates:
    capacity: int  # the most lines the file can have
    _digests: array = field(init=False, repr=False)
    _firsts: array = field(init=False, repr=False)  # line << 32 | chunk; 0: empty slot

    def __post_init__(self) -> None:
        empty = bytes(8 * (self.capacity * 3 // 2 + 1))
        self._digests, self._firsts = array("Q", empty), array("Q", empty)

    def original(self, key: bytes, line: int, chunk: int) -> tuple[int, int] | None:
        """(line, chunk) of the first line with this key, or None when this is the first
        (then it is remembered with `chunk`, the chunk it will run in)."""
        size = len(self._firsts)
        slot, digest = int.from_bytes(key[:8]) % size, int.from_bytes(key[8:])
        while first := self._firsts[slot]:
            if self._digests[slot] == digest:
                return first >> 32, first & 0xFFFFFFFF
            slot = slot + 1 if slot + 1 < size else 0
        self._digests[slot], self._firsts[slot] = digest, line << 32 | chunk
        return None
