"""What generation returns for one prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GenerationResult:
    """text / token_ids: the answer only. With early_stop, token_ids end before the first
    stop token; without, they are the whole gen_length answer as decoded (text always ends
    before the first stop token). finish_reason: "stop" when the answer holds a stop token,
    else "length". nfe: model forwards that computed this sequence. seconds: time from
    joining the running batch to leaving it. logprobs / top_logprobs (when asked for):
    per token of token_ids, its log-probability at the iteration that committed it, and
    the most likely (token id, log-probability) pairs there. edited_tokens / post_steps
    (the "editing" decoder only, else None): tokens it rewrote after placing them, and
    forwards it ran over blocks that had no mask left (dinfer_engine/decoding/editing.py). An
    infill prompt (dinfer_engine/infill.py): `gaps` holds each gap's text (text is them joined,
    token_ids their tokens), `spans` the gaps' lengths decoded, and with a length search
    `length_search` every candidate's (length, mean log-probability of its committed
    tokens); its nfe counts every candidate's forwards. prefix_tokens_reused (an engine
    with a prefix cache and a block-causal model, else None): prompt tokens whose
    keys/values came from the prefix cache instead of a forward (dinfer_engine/prefix_cache.py)."""

    text: str
    token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int
    nfe: int
    seconds: float
    logprobs: list[float] | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    edited_tokens: int | None = None
    post_steps: int | None = None
    gaps: list[str] | None = None
    spans: list[int] | None = None
    length_search: list[tuple[int, float]] | None = None
    prefix_tokens_reused: int | None = None
