"""What a caller asks the engine for: one object per prompt, carrying every value that may
differ from its neighbours in one call (docs/adr/058-one-loop-requests-as-objects.md).

`Engine.generate` takes these (or plain prompts, each then a request with no values of
its own); the engine plans each into the rows it decodes (dinfer_engine.batch.Request:
token ids, an infill canvas, a compiled grammar), which go to the generation loop and to
tensor-parallel ranks as they are. Values that the engine holds per row live here, not in
GenerationConfig, so that requests that differ only in them share a batch. Read without
torch: the service builds them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dinfer_engine.cache_scope import CacheScope
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.infill import Prompt
from dinfer_engine.sampling_controls import SamplingControls


@dataclass(frozen=True)
class GenerationRequest:
    """prompt: text, token ids or an Infill. seed: the seed of the row's noise (None: the
    config's seed, else a fresh one). constraint: what the answer must match (None: free;
    docs/structured-outputs.md). scope: whose cached prompt blocks it may reuse
    (dinfer_engine/cache_scope.py). controls: its sampling controls (None: the config's).
    fields: its own values of the field table's per-row rows (`per_row=True` in
    dinfer_engine/generation_fields.py, e.g. logprobs), over the call's config."""

    prompt: Prompt
    seed: int | None = None
    constraint: ConstraintSpec | None = None
    scope: CacheScope = CacheScope()
    controls: SamplingControls | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)


def as_request(asked: Prompt | GenerationRequest) -> GenerationRequest:
    """A caller's item: a request as it is, a plain prompt as a request of its own."""
    return asked if isinstance(asked, GenerationRequest) else GenerationRequest(asked)
