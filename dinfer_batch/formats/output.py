"""Items as OpenAI `BatchRequestOutput` lines, read back in input order a page at a time:
one line per item with its `n` samples as `choices`, or one line per sample
(`per_sample`: custom_id `<custom_id>-s<i>`, one choice), the shape dataset pipelines
want."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.formats.fastjson import dumps
from dinfer_batch.formats.logprobs import chat_logprobs, completion_logprobs
from dinfer_batch.formats.params import sample_seeds
from dinfer_batch.parallel import forkable, ordered_map
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job

PAGE = 5000
# the columns a line shows (not job_id, chunk_id, attempts, duplicate_of: less to fetch)
_ItemRow = namedtuple("_ItemRow", "line custom_id status error_code error_message request "
                                  "output_text samples finish_reason prompt_tokens "
                                  "completion_tokens nfe latency_s finished_at logprobs")
_COLUMNS = [Item.__table__.c[name] for name in _ItemRow._fields]


class _JobFields(NamedTuple):
    """The job's attributes every line reads, read once: an ORM attribute costs a
    descriptor call each time, several per line over a million lines."""

    id: str
    model: str
    status: str
    params: dict[str, Any]
    seed_base: int
    created_at: float

    @classmethod
    def of(cls, job: Job) -> _JobFields:
        return cls(job.id, job.model, job.status, job.params or {}, job.seed_base,
                   job.created_at)


def outputs(sessions: sessionmaker[Session], job: Job,
            per_sample: bool = False) -> Iterator[dict[str, Any]]:
    """Every line of the job, in input order; memory is bounded by PAGE."""
    fields = _JobFields.of(job)
    for after in _pages(sessions, job.id):
        yield from _lines(fields, _page(sessions, job.id, after), per_sample)


def output_texts(url: str, job: Job, per_sample: bool = False, split_errors: bool = False,
                 processes: int = 0) -> Generator[tuple[str, str], None, None]:
    """The job's lines as JSONL text, a page at a time in input order: (lines, "") or,
    with `split_errors`, (successes, failures). `processes` (forked) each read and
    format pages while this one writes them; close the iterator when stopping early."""
    sessions = db.sessions(url)
    pages = _pages(sessions, job.id)
    processes = forkable(min(processes, len(pages) - 1))
    if processes:
        db.db_engine(url).dispose()  # a forked process must open connections of its own
    return ordered_map(_PageText(url, _JobFields.of(job), per_sample, split_errors), pages,
                       processes)


@dataclass(frozen=True)
class _PageText:
    url: str
    job: _JobFields
    per_sample: bool
    split_errors: bool

    def __call__(self, after: int) -> tuple[str, str]:
        good: list[str] = []
        failed: list[str] = []
        for line in _lines(self.job, _page(db.sessions(self.url), self.job.id, after),
                           self.per_sample):
            (failed if self.split_errors and line["error"] else good).append(dumps(line))
        return "".join(f"{text}\n" for text in good), "".join(f"{text}\n" for text in failed)


def _pages(sessions: sessionmaker[Session], job_id: str) -> range:
    """Where each page starts. Pages are ranges of line numbers, not LIMITs: a planner
    misled by stale statistics (right after a million-row write) then sorts at most a
    page, not the rest of the job, per page."""
    with sessions() as session:
        last = session.scalar(select(func.max(Item.line)).where(Item.job_id == job_id)) or 0
    return range(0, last, PAGE)


def _page(sessions: sessionmaker[Session], job_id: str, after: int) -> list[_ItemRow]:
    with sessions() as session:  # plain rows with the items' attributes, not ORM objects
        rows = session.connection().execute(
            select(*_COLUMNS).where(Item.job_id == job_id, Item.line > after,
                                    Item.line <= after + PAGE)
            .order_by(Item.line)).all()
    return [_ItemRow._make(row) for row in rows]  # a Row's attributes cost 10x a tuple's


def _lines(job: _JobFields, page: list[_ItemRow],
           per_sample: bool) -> Iterator[dict[str, Any]]:
    for item in page:
        if not per_sample:
            yield batch_output(job, item)
            continue
        for index in range(_sample_count(job, item)):
            yield batch_output(job, item, index)


def batch_output(job: _JobFields, item: _ItemRow, sample: int | None = None) -> dict[str, Any]:
    """The item's line; with `sample`, the line of that one sample."""
    request_id = f"{job.id}-{item.line}"
    line_id = f"batch_req_{job.id.removeprefix('batch_')}_{item.line}"
    custom_id = item.custom_id
    if sample is not None:
        request_id += f"-s{sample}"
        line_id, custom_id = f"{line_id}_s{sample}", f"{custom_id}-s{sample}"
    if item.status == "completed":
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": 200, "request_id": request_id,
                             "body": _body(job, item, request_id, sample)},
                "error": None}
    if item.status == "failed":
        error = {"code": item.error_code, "message": item.error_message}
    elif job.status in ("cancelled", "cancelling"):
        error = {"code": "batch_cancelled", "message": "the job was cancelled before this "
                                                       "request ran"}
    else:
        error = {"code": "pending", "message": "this request has not run yet"}
    return {"id": line_id, "custom_id": custom_id, "response": None, "error": error}


def _sample_count(job: _JobFields, item: _ItemRow) -> int:
    if item.request is None:  # an invalid line: one error line
        return 1
    return (job.params | item.request["params"]).get("n", 1)


def _samples(item: _ItemRow) -> list[dict[str, Any]]:
    """Each sample's text, finish reason, tokens, forwards, latency and logprobs: the
    item's own columns when it has one sample (n = 1, the common case)."""
    return item.samples or [{"text": item.output_text, "finish_reason": item.finish_reason,
                             "completion_tokens": item.completion_tokens or 0,
                             "nfe": item.nfe, "latency_s": item.latency_s,
                             "logprobs": item.logprobs}]


def _metrics(nfe: int | None, completion_tokens: int, latency_s: float | None,
             seeds: list[int]) -> dict[str, Any]:
    return {"nfe": nfe,
            "tokens_per_forward": round(completion_tokens / nfe, 3) if nfe else None,
            "latency_s": latency_s, "seeds": seeds}


def _choice(index: int, sample: dict[str, Any], chat: bool) -> dict[str, Any]:
    logprobs = sample.get("logprobs")
    if logprobs is not None:
        logprobs = chat_logprobs(logprobs) if chat else completion_logprobs(logprobs)
    if chat:
        return {"index": index, "finish_reason": sample["finish_reason"],
                "logprobs": logprobs,
                "message": {"role": "assistant", "content": sample["text"]}}
    return {"index": index, "finish_reason": sample["finish_reason"], "logprobs": logprobs,
            "text": sample["text"]}


def _body(job: _JobFields, item: _ItemRow, request_id: str, only: int | None) -> dict[str, Any]:
    request = item.request or {}
    chat = "messages" in request
    params = request.get("params", {})
    samples = _samples(item)
    seeds = sample_seeds(job.params | params if job.params else params, job.seed_base,
                         item.line)
    if len(seeds) != len(samples):
        raise ValueError(f"line {item.line}: {len(samples)} samples for {len(seeds)} seeds")
    if only is None:
        completion_tokens = item.completion_tokens or 0
        metrics = _metrics(item.nfe, completion_tokens, item.latency_s, seeds)
    else:
        samples, seeds = [samples[only]], [seeds[only]]
        completion_tokens = samples[0]["completion_tokens"]
        metrics = _metrics(samples[0]["nfe"], completion_tokens, samples[0]["latency_s"],
                           seeds)
    prompt_tokens = item.prompt_tokens or 0
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(item.finished_at or job.created_at),
        "model": job.model,
        "choices": [_choice(index, sample, chat) for index, sample in enumerate(samples)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "metrics": metrics,
    }
