"""Engine requests for tests that give each prompt its own seed, constraint or cache
scope (dinfer_engine.GenerationRequest), from lists beside the prompts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dinfer_engine.request import GenerationRequest


def asked(prompts: Sequence[Any], seeds: Sequence[int | None] | None = None,
          constraints: Sequence[Any] | None = None, scopes: Sequence[Any] | None = None
          ) -> list[GenerationRequest]:
    """One request per prompt; a list given must have one value per prompt."""
    count = len(prompts)
    for name, values in (("seeds", seeds), ("constraints", constraints), ("scopes", scopes)):
        assert values is None or len(values) == count, f"{len(values)} {name} for {count}"
    return [GenerationRequest(prompt, seed=None if seeds is None else seeds[i],
                              constraint=None if constraints is None else constraints[i],
                              **({} if scopes is None else {"scope": scopes[i]}))
            for i, prompt in enumerate(prompts)]
