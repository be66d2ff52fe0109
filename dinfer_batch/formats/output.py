"""Items as OpenAI `BatchRequestOutput` lines, read back in input order a page at a time.
A million-line job streams at well over 100,000 lines/s: pages are plain rows (no ORM
objects), and whether a request was a chat is asked of the database, so the stored
request is never decoded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.storage.tables import Item, Job

PAGE = 5000
COLUMNS = (Item.line, Item.custom_id, Item.status, Item.output_text, Item.finish_reason,
           Item.prompt_tokens, Item.completion_tokens, Item.nfe, Item.latency_s,
           Item.error_code, Item.error_message, Item.finished_at,
           Item.request["messages"].as_string().is_not(None).label("chat"))


def outputs(sessions: sessionmaker[Session], job: Job) -> Iterator[dict[str, Any]]:
    """Every line of the job, in input order; memory is bounded by PAGE. Pages are ranges
    of line numbers, not LIMITs: a planner misled by stale statistics (right after a
    million-row write) then sorts at most a page, not the rest of the job, per page."""
    shape = _JobShape.of(job)
    with sessions() as session:
        last = session.scalar(select(func.max(Item.line)).where(Item.job_id == job.id)) or 0
    for after in range(0, last, PAGE):
        with sessions() as session:
            page = session.connection().execute(
                select(*COLUMNS).where(Item.job_id == job.id, Item.line > after,
                                       Item.line <= after + PAGE)
                .order_by(Item.line)).all()
        for item in page:
            yield shape.line(item)


@dataclass(frozen=True)
class _JobShape:
    """What every line of one job shares, read from the job once."""

    job_id: str
    short_id: str
    model: str
    created: int
    unfinished: dict[str, str]  # the error of an item that has not run

    @classmethod
    def of(cls, job: Job) -> _JobShape:
        if job.status in ("cancelled", "cancelling"):
            unfinished = {"code": "batch_cancelled",
                          "message": "the job was cancelled before this request ran"}
        else:
            unfinished = {"code": "pending", "message": "this request has not run yet"}
        return cls(job.id, job.id.removeprefix("batch_"), job.model, int(job.created_at),
                   unfinished)

    def line(self, item: Row[Any]) -> dict[str, Any]:
        (line_no, custom_id, status, text, finish_reason, prompt_tokens, completion_tokens,
         nfe, latency_s, error_code, error_message, finished_at, chat) = item  # COLUMNS
        request_id = f"{self.job_id}-{line_no}"
        line = {"id": f"batch_req_{self.short_id}_{line_no}", "custom_id": custom_id}
        if status == "failed":
            return line | {"response": None,
                           "error": {"code": error_code, "message": error_message}}
        if status != "completed":
            return line | {"response": None, "error": self.unfinished}
        prompt_tokens, completion_tokens = prompt_tokens or 0, completion_tokens or 0
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(finished_at or self.created),
            "model": self.model,
            "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "metrics": {"nfe": nfe,
                        "tokens_per_forward": round(completion_tokens / nfe, 3) if nfe else None,
                        "latency_s": latency_s},
        }
        return line | {"response": {"status_code": 200, "request_id": request_id,
                                    "body": body}, "error": None}
