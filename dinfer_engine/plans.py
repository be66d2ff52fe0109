"""What a caller's prompt becomes: the rows the loop decodes for it and how its result is
made of them (docs/adr/058-one-loop-requests-as-objects.md). A plain prompt is one row
whose answer is its result; an infill prompt (dinfer_engine/infill.py) is one row per
candidate canvas, whose gaps are its result. The engine asks a plan, never a prompt's
kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dinfer_engine.generation_config import ResolvedConfig
from dinfer_engine.infill import (
    Infill,
    Prompt,
    RowPlan,
    infill_result,
    own_top,
    plan_infill,
)
from dinfer_engine.prefix_cache import REUSED
from dinfer_engine.result import GenerationResult
from dinfer_engine.sampling_controls import NEUTRAL, SamplingControls

if TYPE_CHECKING:
    from dinfer_engine.batch import FinishedRow

Decode = Callable[[list[int], list[int]], str]  # an answer's ids, the tokens before them


@dataclass
class Plan:
    """rows: one, or an infill prompt's candidates. config: what its request reads (the
    call's, with the request's per-row fields: generation_config.for_request). infill: the
    rows are infill canvases (their gaps are the answer); search: a length search (the
    best candidate wins). controls: the sampling controls its config asks for."""

    rows: list[RowPlan]
    config: ResolvedConfig
    infill: bool = False
    search: bool = False
    controls: SamplingControls = NEUTRAL  # its rows' (SamplingControls.of its config)

    def result(self, finished: list[FinishedRow], stop_ids: list[int], decode: Decode
               ) -> GenerationResult:
        """The prompt's result from its finished rows (one per plan row, same order)."""
        if self.infill:
            return infill_result(self.rows, finished, self.config, stop_ids, decode,
                                 self.search)
        return answer_result(finished[0], self.config, stop_ids, decode)


def plan_prompt(prompt: Prompt, config: ResolvedConfig,
                encode: Callable[[str | Sequence[int]], list[int]],
                piece_ids: Callable[[str | Sequence[int], bool], list[int]],
                mask_id: int, limit: int) -> Plan:
    """A prompt's plan: `encode` tokenizes a plain prompt (checked against the config),
    `piece_ids(piece, first)` an infill piece; ValueError if it cannot be generated for
    (`limit`: the model's max_sequence_length). `config`: what the request reads."""
    if not isinstance(prompt, Infill):
        return Plan([RowPlan(encode(prompt))], config)
    pieces = [piece_ids(piece, i == 0) for i, piece in enumerate(prompt.pieces)]
    return Plan(plan_infill(prompt, pieces, config, mask_id, limit), config, infill=True,
                search=prompt.lengths is not None)


def run_config(plans: list[Plan], config: ResolvedConfig) -> ResolvedConfig:
    """The config rows run under: log-probabilities are recorded when any request asks
    for them (with the most alternatives any asks) or a prompt searches (a length search
    scores its rows by them); each result keeps what its own request asked."""
    if not plans:
        return config
    return dataclasses.replace(
        config, logprobs=any(plan.config.logprobs or plan.search for plan in plans),
        top_logprobs=max(plan.config.top_logprobs for plan in plans))


class PromptRows:
    """The rows decoded for each prompt (one, or an infill search's candidates), in
    order: `finish` gathers a prompt's finished rows and hands them to `result` (prompt
    index, its rows in plan order) once the last is in."""

    def __init__(self, plans: list[Plan],
                 result: Callable[[int, list[FinishedRow]], None]) -> None:
        self.plans, self.result = plans, result
        self.owner = [index for index, plan in enumerate(plans) for _ in plan.rows]
        self.finished: dict[int, list[FinishedRow]] = {}

    def finish(self, row: FinishedRow) -> None:
        index = self.owner[row.request.index]
        done = self.finished.setdefault(index, [])
        done.append(row)
        if len(done) == len(self.plans[index].rows):
            self.result(index, sorted(done, key=lambda r: r.request.index))


def answer_result(row: FinishedRow, config: ResolvedConfig, stop_ids: list[int],
                  decode: Decode) -> GenerationResult:
    """A plain prompt's result: its answer cut at gen_length, an upper bound (every
    canvas is whole blocks, DiffusionGemma's too, as transformers decodes them: ADR 059),
    up to the first stop token (all of it without early_stop), decoded after the prompt's
    last tokens; log-probabilities only when asked for (a length search beside it records
    them for every row)."""
    answer = row.answer[:config.gen_length]
    stop = next((i for i, t in enumerate(answer) if t in stop_ids), None)
    ended = answer if stop is None else answer[:stop]
    token_ids = ended if config.early_stop else answer
    logprobs = row.logprobs if config.logprobs else None
    top = own_top(row.top_logprobs, config)
    return GenerationResult(
        text=decode(ended, row.request.prompt),
        token_ids=token_ids,
        finish_reason="length" if stop is None else "stop",
        prompt_tokens=len(row.request.prompt),
        completion_tokens=len(token_ids),
        nfe=row.nfe,
        seconds=row.seconds,
        logprobs=None if logprobs is None else logprobs[:len(token_ids)],
        top_logprobs=None if top is None else top[:len(token_ids)],
        edited_tokens=row.counters.get("edited_tokens"),
        post_steps=row.counters.get("post_steps"),
        prefix_tokens_reused=row.counters.get(REUSED),
    )
