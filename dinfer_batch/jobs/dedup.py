"""Identical requests inside one job run once. Two lines are identical when their rendered
prompt (or messages), their effective parameters and their seeds are the same; a greedy
request (temperature 0, the model's default included) does not depend on its seed, so its
seed is left out. The first such line runs; the later ones point at it (`duplicate_of`) and
get a copy of its result when it is written (`chunk_state.record`).

Memory: one entry per distinct valid line, a 128-bit digest mapped to one int that packs
the line and its chunk: about 130 bytes (measured), so 130 MB for a million distinct
lines (a dict of bytes -> tuple would take 220)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from dinfer_batch.formats.params import sample_seeds
from dinfer_batch.model_info import ModelInfo


@dataclass
class Duplicates:
    model: ModelInfo
    defaults: dict[str, Any]
    seed_base: int
    first: dict[int, int] = field(default_factory=dict)  # key -> line << 32 | chunk

    def key(self, request: dict[str, Any], line: int) -> int:
        params = self.defaults | request["params"]
        seeds = (sample_seeds(params, self.seed_base, line)
                 if self.model.samples_randomly(params) else None)
        content = request.get("prompt", request.get("messages"))
        params = {k: v for k, v in params.items() if k != "seed"}
        text = json.dumps([content, params, seeds], sort_keys=True, ensure_ascii=False)
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest())

    def original(self, request: dict[str, Any], line: int, chunk: int) -> tuple[int, int] | None:
        """(line, chunk) of the first line with this request, or None when this is the first
        (then it is remembered with `chunk`, the chunk it will run in)."""
        key = self.key(request, line)
        earlier = self.first.get(key)
        if earlier is None:
            self.first[key] = line << 32 | chunk
            return None
        return earlier >> 32, earlier & 0xFFFFFFFF
