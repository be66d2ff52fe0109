"""Everything about an input line that does not depend on the lines before it: its
request, its error, and the key that finds its duplicates. Batches of lines are checked
here, in `submit`'s own process or in parallel processes (`ordered_map`); numbering
chunks and spotting duplicates, which need the lines before, stay with `ingest`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from dinfer_batch.fastjson import dumps
from dinfer_batch.formats.lines.columns import LineParser
from dinfer_batch.formats.lines.cost import request_cost
from dinfer_batch.formats.lines.infill import answer_source, answer_tokens
from dinfer_batch.formats.lines.prompts import prompt_count, prompts_of, row_count
from dinfer_batch.formats.lines.requests import (
    ParsedLine,
    endpoint_of,
    parse_line,
    prompt_ids,
    prompt_text,
)
from dinfer_batch.formats.parameters.compat import in_user_names
from dinfer_batch.jobs.intake.dedup import RequestKey
from dinfer_batch.jobs.intake.prefix_order import PrefixKey, prefix_key
from dinfer_batch.jobs.spec import JobSpec
from dinfer_engine.request_check import request_problem


class CheckedLine(NamedTuple):
    line: int
    custom_id: str | None  # the line's own, if any (results read line-<number> for none)
    request: str | None  # the normalised request as JSON text; None when the line failed
    error: str | None
    key: bytes | None  # equal for identical requests (dedup.RequestKey)
    tokens: int | None  # prompt + canvas tokens of all samples, when counted (quota.py)
    other_model: str | None  # the model the line named, when not the job's
    cost: int = 1  # what it costs in generations (formats/lines/cost.py)
    prefix: PrefixKey = b""  # what its prompt begins with (jobs/intake/prefix_order.py)


class TextBatch(NamedTuple):
    first_line: int
    texts: list[str]  # the file's lines from `first_line` on, blank ones included


@dataclass
class LineChecker:
    spec: JobSpec
    template: LineParser | None = None  # a template, or a table's columns: not requests
    count_tokens: bool = False  # the owner has a token limit: count every prompt
    max_request_tokens: int | None = None  # the owner's ceiling on max_tokens x n
    max_line_cost: int | None = None  # the owner's largest chunk: a line's cost may not pass it
    _key: RequestKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._key = RequestKey(self.spec.model, self.spec.params, self.spec.seed_base)

    def __call__(self, batch: TextBatch) -> list[CheckedLine]:
        parse = self.template.parse if self.template else partial(
            parse_line, endpoint=self.spec.endpoint)
        parsed = [parse(text, number)
                  for number, text in enumerate(batch.texts, start=batch.first_line)
                  if text.strip()]
        rejected, tokens, costs = _line_errors(
            self.spec, [p for p in parsed if p.request], self.count_tokens,
            self.max_request_tokens, self.max_line_cost)
        checked = []
        for line, custom_id, request, error, model in parsed:
            custom_id = custom_id or None
            other = model if model is not None and not self.spec.model.named(model) else None
            if other is not None and self.spec.strict_model and not error:
                error = (f"line {line}: the body names model {other!r}, but this job runs on "
                         f"{self.spec.model.name!r} (--strict-model)")
            error = error or rejected.get(line)
            if error or request is None:
                checked.append(CheckedLine(line, custom_id, None, error, None, None, None))
            else:
                checked.append(CheckedLine(line, custom_id, dumps(request), None,
                                           self._key(request, line), tokens.get(line), other,
                                           costs[line], prefix_key(request)))
        return checked


def _line_errors(spec: JobSpec, valid: list[ParsedLine], count_tokens: bool,
                 max_request_tokens: int | None = None, max_line_cost: int | None = None
                 ) -> tuple[dict[int, str], dict[int, int], dict[int, int]]:
    """Line -> error for parameters the engine would reject, and for prompts that leave no
    room in the model's context for the answer, for max_tokens x n over the owner's
    `max_request_tokens` and for a cost over `max_line_cost`: tokenized only when neither
    a cheap upper bound on their length proves that they fit nor a cheap lower bound that
    they do not (so a 10 MB prompt is refused by its length, never tokenized), or when
    `count_tokens`; with `count_tokens`, line -> its prompt tokens + the canvas tokens of
    its rows (max_tokens rounded up to whole blocks, ADR 059; a list of prompts counts
    its longest for each); and line -> its cost
    (formats/lines/cost.py)."""
    errors: dict[int, str] = {}
    answers, computed, samples, costs = {}, {}, {}, {}
    for parsed in valid:
        checked = _request_check(spec, parsed, max_request_tokens, max_line_cost)
        if isinstance(checked, str):
            errors[parsed.line] = checked
        else:
            (answers[parsed.line], computed[parsed.line], samples[parsed.line],
             costs[parsed.line]) = checked
    counted = _prompt_tokens(spec, [p for p in valid if p.line in answers], answers,
                             count_tokens, errors)
    if not count_tokens:
        return errors, {}, costs
    prompts = {parsed.line: prompt_count(parsed.request or {}) for parsed in valid}
    return errors, {line: count * prompts[line] + computed[line] * samples[line]
                    for line, count in counted.items()}, costs


def _request_check(spec: JobSpec, parsed: ParsedLine, max_request_tokens: int | None,
                   max_line_cost: int | None) -> str | tuple[int, int, int, int]:
    """The line's error for what it asks, or (its answer's tokens, the canvas tokens
    decoded for one sample (ADR 059), its samples, its cost)."""
    line, request = parsed.line, parsed.request or {}  # every line checked has a request
    if spec.endpoint and endpoint_of(request) != spec.endpoint:
        return (f"line {line}: a {spec.endpoint} batch takes {spec.endpoint} requests only, "
                f"not {endpoint_of(request)}")
    params = spec.params | request["params"]
    vocab = spec.model.vocab_size
    if vocab and "prompt" in request and any(
            max(p) >= vocab for p in prompts_of(request) if not isinstance(p, str)):
        return f"line {line}: prompt token ids must lie in [0, {vocab:,}) (the vocabulary)"
    try:
        config = spec.model.config(params)
        problem = request_problem(spec.model.family_key, config.decoder,
                                  infill="suffix" in request,
                                  constrained="structured" in params,
                                  infill_name="infill (suffix)",
                                  stops_banned=bool(config.ignore_eos or config.min_tokens))
        if problem is not None:
            raise ValueError(problem)
        answer = answer_tokens(request, params, config.gen_length)
        computed = answer if "suffix" in request else spec.model.canvas_tokens(config)
        cost = request_cost(request, params, config)
    except ValueError as exc:
        return f"line {line}: {in_user_names(str(exc), request)}"
    if max_line_cost is not None and cost > max_line_cost:
        return (f"line {line}: this request costs {cost:,} generations (n x infill "
                "candidates x the editing decoder's post-steps, docs/service.md), above this "
                f"key's max_chunk_size of {max_line_cost:,}; ask for fewer samples, "
                "candidates or post-steps")
    samples = row_count(request, params)
    if max_request_tokens is not None and computed * samples > max_request_tokens:
        canvas = f" (a canvas of {computed:,}: whole blocks)" if computed != answer else ""
        return (f"line {line}: {_source(spec, request)}{canvas} x {_rows(request, params)} = "
                f"{computed * samples:,} tokens is above this key's max_request_tokens of "
                f"{max_request_tokens:,}; ask for fewer tokens or samples")
    return answer, computed, samples, cost


def _rows(request: dict[str, Any], params: dict[str, Any]) -> str:
    """What the line's rows are, in the words it used: n=2, best_of=4, 3 prompts x n=2."""
    draws = f"best_of={params['best_of']}" if params.get("best_of") else \
        f"n={params.get('n') or 1}"
    prompts = prompt_count(request)
    return f"{prompts} prompts x {draws}" if prompts > 1 else draws


def _prompt_tokens(spec: JobSpec, lines: list[ParsedLine], answers: dict[int, int],
                   count_tokens: bool, errors: dict[int, str]) -> dict[int, int]:
    """Add to `errors` the lines whose prompt leaves no room for their answer in the
    model's context; line -> its prompt's tokens, for those it tokenized (every one that
    fits with `count_tokens`)."""
    sized, known = [], {}
    for parsed in lines:
        text = prompt_text(parsed.request or {})
        if ids := prompt_ids(parsed.request or {}):  # token ids: counted as they are
            known[parsed.line] = ids
            continue
        floor = len(text) // spec.model.tokens.chars_per_token()
        if floor + answers[parsed.line] > spec.model.max_context:  # whatever its tokens
            errors[parsed.line] = _too_long(
                spec, parsed, floor, f"its {len(text)} characters are at least {floor} tokens",
                answers[parsed.line])
        else:
            sized.append((parsed.line, text))
    if not count_tokens:
        bounds = spec.model.token_bounds([text for _, text in sized])
        sized = [(line, text) for (line, text), bound in zip(sized, bounds, strict=True)
                 if bound + answers[line] > spec.model.max_context]
    counts = spec.model.token_counts([text for _, text in sized]) if sized else []
    by_line = {parsed.line: parsed for parsed in lines}
    counted = known | {line: count for (line, _), count in zip(sized, counts, strict=True)}
    for line, count in counted.items():
        if count + answers[line] > spec.model.max_context:
            errors[line] = _too_long(spec, by_line[line], count, f"{count} tokens",
                                     answers[line])
    return counted


def _source(spec: JobSpec, request: dict) -> str:
    """What sets the request's answer tokens, as it spelt it (formats/lines/infill.py)."""
    params = spec.params | request["params"]
    return answer_source(request, params, spec.model.gen_length(params))


def _too_long(spec: JobSpec, parsed: ParsedLine, prompt_tokens: int, prompt: str,
              answers: int) -> str:
    """A line whose prompt and answer do not fit the context: the answer's field is named
    (the field the user spelt, its value) with what would fit."""
    context, source = spec.model.max_context, _source(spec, parsed.request or {})
    fits = max(context - prompt_tokens, 0)
    if answers >= context:  # no prompt would fit: the field is what is wrong
        return (f"line {parsed.line}: {source} asks for {answers:,} answer tokens, as many "
                f"as the model's context of {context:,} or more; at most {fits:,} fit beside "
                "this prompt")
    return (f"line {parsed.line}: prompt is too long: {prompt}, + {answers:,} answer tokens "
            f"({source}) exceed the model's context of {context:,}; at most {fits:,} answer "
            "tokens fit beside it")

