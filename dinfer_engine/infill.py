"""Fill in the middle: a prompt made of text pieces around masked spans, decoded in place.

The canvas of an infill prompt is pieces[0], spans[0] masks, pieces[1], ..., the last
piece (dllm's MDLM `infill` canvas, and the demo model's training canvas: no separators,
the span holding the middle then EOS padding). The row's prompt is pieces[0]; everything
after it (masks and given text) is the row's canvas (dinfer_engine.batch.Request.canvas), decoded
on blocks counted from the first mask, by any decoder and cache strategy; given tokens
never change. Each gap's text ends before its first stop token (the EOS filling the end
of the span).

A length search (`lengths`) decodes one row per candidate span length, side by side in
the batch, and keeps the row whose committed tokens have the highest mean
log-probability (each token's log-probability at the iteration that committed it); every
gap takes the candidate's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.result import GenerationResult

if TYPE_CHECKING:  # dinfer_engine.batch imports torch, which `import dinfer_engine` never pays for
    from dinfer_engine.batch import FinishedRow

AUTO = "auto"
SHORTEST_AUTO = 8  # "auto": gen_length and its halvings down to this


@dataclass(frozen=True)
class Infill:
    """pieces: the text around the gaps, one more than the gaps (strings, or lists of
    token ids; the first piece is tokenized as a prompt, the others without special
    tokens). spans: each gap's length in tokens (None: every gap is gen_length long).
    lengths: candidate lengths for a length search ("auto": gen_length and its halvings
    down to 8), each candidate giving every gap that length; spans are then ignored.
    The canvas is the raw text: the `chat` setting does not apply."""

    pieces: Sequence[str | Sequence[int]]
    spans: Sequence[int] | None = None
    lengths: Sequence[int] | str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pieces, str) or len(self.pieces) < 2:
            raise ValueError("an infill prompt needs at least two pieces (the text before "
                             "and after a gap)")
        kinds = {isinstance(piece, str) for piece in self.pieces}
        if len(kinds) > 1:
            raise ValueError("infill pieces must all be text or all be token ids")
        if self.spans is not None:
            if len(self.spans) != len(self.pieces) - 1:
                raise ValueError(f"{len(self.pieces)} pieces need {len(self.pieces) - 1} "
                                 f"span lengths, got {len(self.spans)}")
            _check_lengths("spans", self.spans)
        if isinstance(self.lengths, str):
            if self.lengths != AUTO:
                raise ValueError(f"infill lengths must be a list of integers or {AUTO!r}, "
                                 f"got {self.lengths!r}")
        elif self.lengths is not None:
            if not self.lengths:
                raise ValueError("infill lengths must name at least one candidate length")
            _check_lengths("infill lengths", self.lengths)

    @property
    def gaps(self) -> int:
        return len(self.pieces) - 1

    def span_sets(self, gen_length: int) -> list[list[int]]:
        """The gaps' lengths of each row to decode: one row, or one per candidate."""
        if self.lengths is None:
            return [list(self.spans) if self.spans is not None else [gen_length] * self.gaps]
        candidates: list[int]
        if isinstance(self.lengths, str):  # AUTO
            candidates, length = [], gen_length
            while length >= SHORTEST_AUTO or not candidates:
                candidates.append(length)
                length //= 2
            candidates.reverse()
        else:
            candidates = sorted(set(self.lengths))
        return [[length] * self.gaps for length in candidates]


def _check_lengths(name: str, values: Sequence[int]) -> None:
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be integers >= 1, got {value!r}")


Prompt = str | Sequence[int] | Infill  # what a caller asks the engine to answer


@dataclass
class RowPlan:
    """One row to decode for a prompt: its prompt ids, its canvas (None: an ordinary
    row) and the (start, length) of each gap in the canvas."""

    prompt: list[int]
    canvas: list[int] | None = None
    gaps: list[tuple[int, int]] = field(default_factory=list)


def plan_rows(pieces: list[list[int]], span_sets: list[list[int]], mask_id: int
              ) -> list[RowPlan]:
    """The rows of an infill prompt whose pieces are token ids."""
    plans = []
    for spans in span_sets:
        canvas: list[int] = []
        gaps = []
        for span, piece in zip(spans, pieces[1:], strict=True):
            gaps.append((len(canvas), span))
            canvas += [mask_id] * span + piece
        plans.append(RowPlan(pieces[0], canvas, gaps))
    return plans


def plan_infill(prompt: Infill, pieces: list[list[int]], config: ResolvedConfig,
                mask_id: int, limit: int) -> list[RowPlan]:
    """The rows of an infill prompt whose pieces are tokenized; ValueError when a canvas
    is longer than the model's max_sequence_length `limit`."""
    plans = plan_rows(pieces, prompt.span_sets(config.gen_length), mask_id)
    longest = max(len(p.prompt) + len(p.canvas or []) for p in plans)
    if longest > limit:
        raise ValueError(f"infill canvas of {longest} tokens exceeds the model's "
                         f"max_sequence_length {limit}")
    return plans


def infill_result(plans: list[RowPlan], rows: list[FinishedRow], config: ResolvedConfig,
                  stop_ids: list[int], decode: Callable[[list[int], list[int]], str],
                  search: bool) -> GenerationResult:
    """The result of an infill prompt from its finished rows (one per plan, same order):
    the best candidate's gaps, each decoded after the tokens before it (`decode(ids,
    context)`); with a search, every candidate's (length, score)."""
    scores = [_score(plan, row) for plan, row in zip(plans, rows, strict=True)]
    best = max(range(len(rows)), key=lambda i: scores[i]) if search else 0
    plan, row = plans[best], rows[best]
    token_ids: list[int] = []
    logprobs: list[float] = []
    top: list[list[tuple[int, float]]] = []
    texts, stopped = [], True
    for start, length in plan.gaps:
        span = row.answer[start:start + length]
        end = next((i for i, t in enumerate(span) if t in stop_ids), None)
        stopped &= end is not None
        kept = span if end is None else span[:end]
        texts.append(decode(kept, [*plan.prompt, *row.answer[:start]]))
        token_ids += kept
        if row.logprobs is not None:
            logprobs += row.logprobs[start:start + len(kept)]
        if row.top_logprobs is not None:
            top += row.top_logprobs[start:start + len(kept)]
    own = own_top(top, config)
    given = len(plan.prompt) + len(plan.canvas or []) - sum(n for _, n in plan.gaps)
    return GenerationResult(
        text="".join(texts), token_ids=token_ids,
        finish_reason="stop" if stopped else "length",
        prompt_tokens=given, completion_tokens=len(token_ids),
        nfe=sum(r.nfe for r in rows), seconds=max(r.seconds for r in rows),
        logprobs=logprobs if config.logprobs else None,
        top_logprobs=own,
        gaps=texts, spans=[n for _, n in plan.gaps],
        length_search=[(p.gaps[0][1], s) for p, s in zip(plans, scores, strict=True)]
        if search else None)


def own_top(top: list[list[tuple[int, float]]] | None, config: ResolvedConfig
            ) -> list[list[tuple[int, float]]] | None:
    """Each position's top alternatives as a request asked for them (`config`: its own):
    the run records the most any request asks for (dinfer_engine/plans.py run_config)."""
    if top is None or not config.logprobs or not config.top_logprobs:
        return None
    return [alternatives[:config.top_logprobs] for alternatives in top]


def _score(plan: RowPlan, row: FinishedRow) -> float:
    """Mean log-probability of the row's committed tokens (its gaps' positions)."""
    if row.logprobs is None:
        return float("nan")
    values = [v for start, length in plan.gaps for v in row.logprobs[start:start + length]]
    return sum(values) / len(values)
