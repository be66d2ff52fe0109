"""An item's output, shaped here only. The engine's results of one item become what its
row stores (`item_outcome`: each sample's text cut at the line's stop strings, its
logprobs and infill gaps, the engine's counts; the first sample in the item's own
columns, every sample when there are several), and a stored item becomes OpenAI
`BatchRequestOutput` lines: one line per item with its `n` samples as `choices`, or one
line per sample (`per_sample`: custom_id `<custom_id>-s<i>`, one choice), the shape
dataset pipelines want. Running the engine is jobs/running/runner.py's; reading the items back,
a page at a time in input order, jobs/reading/results.py's."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from dinfer_batch.formats.function_calling.tool_calls import (
    answer_calls,
    chat_finish_reason,
    chat_tool_message,
)
from dinfer_batch.formats.lines.prompts import (
    Prompt,
    choice_seeds,
    draws,
    echo_text,
    kept,
    prompt_count,
    prompts_of,
)
from dinfer_batch.formats.lines.responses import response_body
from dinfer_batch.formats.results.infill_output import choice_fields, infill_sample, metrics_fields
from dinfer_batch.formats.results.logprobs import chat_logprobs, completion_logprobs, token_logprobs
from dinfer_batch.statuses import ItemStatus, JobStatus

if TYPE_CHECKING:
    from dinfer_engine.result import GenerationResult

# the item columns a line shows (not job_id, chunk_id, attempts, duplicate_of: less to
# fetch), as a named tuple: a SQLAlchemy Row's attribute costs ten times a tuple's
ItemRow = namedtuple("ItemRow", "line custom_id status error_code error_message request "
                                "output_text samples finish_reason prompt_tokens "
                                "completion_tokens nfe latency_s finished_at logprobs "
                                "edited_tokens post_steps cost prefix_tokens_reused",
                                defaults=(None, None))
# the editing decoder's counts, in a line's metrics beside nfe when the decoder edits
EDITING_COUNTS = ("edited_tokens", "post_steps")
# what a line's metrics sum over its samples when the engine reports them: the editing
# counts, and the prompt tokens the prefix cache gave back (ADR 028)
ENGINE_COUNTS = (*EDITING_COUNTS, "prefix_tokens_reused")
# an unfinished request's error once its job expired (written by jobs/expiry.py; a pending
# line of a job read as expired before that shows the same)
EXPIRED_ERROR = ("batch_expired", "the batch expired (completion_window) before this "
                                  "request ran")


@dataclass(frozen=True)
class Outcome:
    """The end of one item, as its row stores it: a result (`error_code` None) or a
    failure."""

    line: int
    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    nfe: int = 0
    latency_s: float = 0.0
    error_code: str | None = None
    error_message: str | None = None
    logprobs: list[dict[str, Any]] | None = None
    samples: list[dict[str, Any]] | None = None  # every sample: n > 1, or an infill line
    edited_tokens: int | None = None  # the editing decoder's counts (summed over samples)
    post_steps: int | None = None
    prefix_tokens_reused: int | None = None  # summed over samples; None: no prefix cache


def cached_tokens(prompt_tokens: int, reused: int | None) -> int:
    """The prompt tokens a line reports as cached (OpenAI's usage `cached_tokens`): those
    the prefix cache gave back, at most its prompt (counted once, as for `n` samples)."""
    return min(reused or 0, prompt_tokens)


def item_outcome(line: int, results: list[GenerationResult], request: dict[str, Any],
                 params: dict[str, Any], tokenizer: Any) -> Outcome:
    """One item's outcome from its rows' results (`params`: its effective parameters):
    the first sample's text in the item's own columns, usage summed (each prompt counted
    once, as OpenAI does for `n`), and every sample listed when there are several."""
    samples, prompt_tokens = _choices(results, request, params, tokenizer)
    return Outcome(line=line, text=samples[0]["text"],
                   finish_reason=samples[0]["finish_reason"],
                   prompt_tokens=prompt_tokens,
                   completion_tokens=sum(s["completion_tokens"] for s in samples),
                   nfe=sum(r.nfe for r in results),  # best_of's dropped draws included
                   latency_s=max(r.seconds for r in results),
                   logprobs=samples[0].get("logprobs"),
                   samples=samples if len(samples) > 1 or "gaps" in samples[0]
                   or "draw" in samples[0] else None,
                   **{name: sum(s[name] for s in samples) for name in ENGINE_COUNTS
                      if name in samples[0]})


def _choices(results: list[GenerationResult], request: dict[str, Any],
             params: dict[str, Any], tokenizer: Any) -> tuple[list[dict[str, Any]], int]:
    """The choices of an item's rows (prompt by prompt, each prompt's draws), indexed
    prompt_index * n + sample, and the prompts' tokens: of best_of draws, the n whose
    answer tokens have the highest mean log-probability ("draw" says which; logprobs kept
    only when asked), each text after its prompt with `echo` (formats/lines/prompts.py)."""
    count, n = draws(params), params.get("n") or 1
    prompts = prompts_of(request) if "prompt" in request else [None]
    choices, prompt_tokens = [], 0
    for index, prompt in enumerate(prompts):
        drawn = results[index * count:(index + 1) * count]
        prompt_tokens += drawn[0].prompt_tokens
        best = kept([_mean_logprob(r) for r in drawn], n) if count > n else range(count)
        for draw in best:
            sample = _sample(drawn[draw], params.get("stop", []), tokenizer)
            if count > n:
                sample["draw"] = draw
                if not params.get("logprobs"):
                    sample.pop("logprobs", None)
            if params.get("echo") and prompt is not None:
                sample = _echoed(sample, prompt, tokenizer)
            choices.append(sample)
    return choices, prompt_tokens


def _mean_logprob(result: GenerationResult) -> float | None:
    """best_of's score: the mean log-probability of the answer's tokens (None, ranked
    last, for an empty answer)."""
    values = result.logprobs or []
    return sum(values) / len(values) if values else None


def _echoed(sample: dict[str, Any], prompt: Prompt, tokenizer: Any) -> dict[str, Any]:
    """The sample with its prompt before its text (echo); with logprobs, the prompt's
    tokens first, whose log-probabilities are null (a diffusion model commits no prompt
    token)."""
    echoed = sample | {"text": echo_text(prompt, tokenizer) + sample["text"]}
    if sample.get("logprobs") is not None:
        ids = prompt if not isinstance(prompt, str) \
            else tokenizer(prompt, add_special_tokens=False)["input_ids"]
        echoed["logprobs"] = [{"token": tokenizer.decode([t]), "logprob": None,
                               "top_logprobs": []} for t in ids] + sample["logprobs"]
    return echoed


def _sample(result: GenerationResult, stops: list[str], tokenizer: Any) -> dict[str, Any]:
    """One sample as stored: its text cut at the first stop string in it (then its finish
    reason is `stop`), tokens, forwards, latency, the engine's counts and logprobs."""
    if result.gaps is not None:
        return infill_sample(result, stops, tokenizer)
    text, finish_reason = result.text, result.finish_reason
    cuts = [text.find(stop) for stop in stops if stop in text]
    if cuts:
        text, finish_reason = text[:min(cuts)], "stop"
    sample = {"text": text, "finish_reason": finish_reason,
              "completion_tokens": result.completion_tokens, "nfe": result.nfe,
              "latency_s": result.seconds}
    sample |= {name: getattr(result, name) for name in ENGINE_COUNTS
               if getattr(result, name) is not None}
    logprobs = token_logprobs(result, tokenizer, min(cuts) if cuts else None)
    return sample if logprobs is None else sample | {"logprobs": logprobs}


class JobFields(NamedTuple):
    """The job's attributes every line reads, read once: an ORM attribute costs a
    descriptor call each time, several per line over a million lines."""

    id: str
    model: str
    status: str
    params: dict[str, Any]
    seed_base: int
    created_at: float


def lines(job: JobFields, page: list[ItemRow],
           per_sample: bool) -> Iterator[dict[str, Any]]:
    for item in page:
        if not per_sample:
            yield batch_output(job, item)
            continue
        for index in range(_sample_count(job, item)):
            yield batch_output(job, item, index)


def batch_output(job: JobFields, item: ItemRow, sample: int | None = None) -> dict[str, Any]:
    """The item's line; with `sample`, the line of that one sample."""
    request_id = f"{job.id}-{item.line}"
    line_id = f"batch_req_{job.id.removeprefix('batch_')}_{item.line}"
    custom_id = item.custom_id or f"line-{item.line}"  # a line without its own
    if sample is not None:
        request_id += f"-s{sample}"
        line_id, custom_id = f"{line_id}_s{sample}", f"{custom_id}-s{sample}"
    if item.status == ItemStatus.COMPLETED:
        line = {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": 200, "request_id": request_id,
                             "body": _body(job, item, request_id, sample)},
                "error": None}
        return _with_metadata(line, item)
    if item.status == ItemStatus.FAILED:
        error = {"code": item.error_code, "message": item.error_message}
    elif job.status in (JobStatus.CANCELLED, JobStatus.CANCELLING):
        error = {"code": "batch_cancelled", "message": "the job was cancelled before this "
                                                       "request ran"}
    elif job.status == JobStatus.EXPIRED:
        error = dict(zip(("code", "message"), EXPIRED_ERROR, strict=True))
    else:
        error = {"code": "pending", "message": "this request has not run yet"}
    return _with_metadata({"id": line_id, "custom_id": custom_id, "response": None,
                           "error": error}, item)


def _with_metadata(line: dict[str, Any], item: ItemRow) -> dict[str, Any]:
    """A table row's other columns come back on its line (formats/lines/columns.py)."""
    if item.request is not None and "metadata" in item.request:
        line["metadata"] = item.request["metadata"]
    return line


def _sample_count(job: JobFields, item: ItemRow) -> int:
    if item.request is None:  # an invalid line: one error line
        return 1
    params = job.params | item.request["params"]
    return prompt_count(item.request) * params.get("n", 1)


def _samples(item: ItemRow) -> list[dict[str, Any]]:
    """Each sample's text, finish reason, tokens, forwards, latency and logprobs: the
    item's own columns when it has one sample (n = 1, the common case)."""
    return item.samples or [{"text": item.output_text, "finish_reason": item.finish_reason,
                             "completion_tokens": item.completion_tokens or 0,
                             "nfe": item.nfe, "latency_s": item.latency_s,
                             "logprobs": item.logprobs, "edited_tokens": item.edited_tokens,
                             "post_steps": item.post_steps,
                             "prefix_tokens_reused": item.prefix_tokens_reused}]


def _metrics(nfe: int | None, completion_tokens: int, latency_s: float | None,
             seeds: list[int], edited_tokens: int | None = None,
             post_steps: int | None = None,
             prefix_tokens_reused: int | None = None) -> dict[str, Any]:
    """nfe, tokens per forward, latency, seeds; the EDITING_COUNTS when the editing
    decoder ran, and prefix_tokens_reused when a prefix cache did."""
    metrics = {"nfe": nfe,
               "tokens_per_forward": round(completion_tokens / nfe, 3) if nfe else None,
               "latency_s": latency_s, "seeds": seeds}
    if edited_tokens is not None:
        metrics |= {"edited_tokens": edited_tokens, "post_steps": post_steps}
    if prefix_tokens_reused is not None:
        metrics["prefix_tokens_reused"] = prefix_tokens_reused
    return metrics


def _choice(index: int, sample: dict[str, Any], chat: bool,
            request: dict[str, Any], request_id: str) -> dict[str, Any]:
    logprobs = sample.get("logprobs")
    if logprobs is not None:
        logprobs = chat_logprobs(logprobs) if chat else completion_logprobs(logprobs)
    if chat:
        calls = answer_calls(sample["text"], request.get("tools"))
        message = {"role": "assistant", "content": sample["text"]} if calls is None else \
            chat_tool_message(calls, request_id, index)
        return {"index": index,
                "finish_reason": chat_finish_reason(calls, sample["finish_reason"]),
                "logprobs": logprobs, "message": message}
    return {"index": index, "finish_reason": sample["finish_reason"], "logprobs": logprobs,
            "text": sample["text"], **choice_fields(sample)}


def _body(job: JobFields, item: ItemRow, request_id: str, only: int | None) -> dict[str, Any]:
    request = item.request or {}
    chat = "messages" in request
    params = request.get("params", {})
    samples = _samples(item)
    seeds = choice_seeds(request, job.params | params if job.params else params,
                         job.seed_base, item.line, samples)
    if len(seeds) != len(samples):
        raise ValueError(f"line {item.line}: {len(samples)} samples for {len(seeds)} seeds")
    if only is None:
        completion_tokens = item.completion_tokens or 0
        metrics = _metrics(item.nfe, completion_tokens, item.latency_s, seeds,
                           item.edited_tokens, item.post_steps, item.prefix_tokens_reused)
        cost = item.cost
    else:
        cost = None if item.cost is None else item.cost // len(samples)
        samples, seeds = [samples[only]], [seeds[only]]
        completion_tokens = samples[0]["completion_tokens"]
        metrics = _metrics(samples[0]["nfe"], completion_tokens, samples[0]["latency_s"],
                           seeds, *(samples[0].get(name) for name in ENGINE_COUNTS))
    if cost is not None:  # in generations (formats/lines/cost.py); lines made before 0016: none
        metrics["cost"] = cost
    prompt_tokens = item.prompt_tokens or 0
    cached = cached_tokens(prompt_tokens, metrics.get("prefix_tokens_reused"))
    if "responses" in request:
        return response_body(request, f"resp_{request_id}", int(item.finished_at or
                                                                 job.created_at),
                             job.model, samples, (prompt_tokens, cached), completion_tokens,
                             metrics)
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(item.finished_at or job.created_at),
        "model": job.model,
        "choices": [_choice(index, sample, chat, request, request_id)
                    for index, sample in enumerate(samples)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": cached}},
        "metrics": metrics | metrics_fields(samples),
    }
