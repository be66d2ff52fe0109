"""Items as OpenAI `BatchRequestOutput` lines, read back in input order a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.formats.logprobs import chat_logprobs, completion_logprobs
from dinfer_batch.storage.tables import Item, Job

PAGE = 1000


def outputs(sessions: sessionmaker[Session], job: Job) -> Iterator[dict[str, Any]]:
    """Every line of the job, in input order; memory is bounded by PAGE."""
    after = 0
    while True:
        with sessions() as session:
            page = list(session.scalars(
                select(Item).where(Item.job_id == job.id, Item.line > after)
                .order_by(Item.line).limit(PAGE)))
        for item in page:
            yield batch_output(job, item)
        if len(page) < PAGE:
            return
        after = page[-1].line


def batch_output(job: Job, item: Item) -> dict[str, Any]:
    request_id = f"{job.id}-{item.line}"
    line = {"id": f"batch_req_{job.id.removeprefix('batch_')}_{item.line}",
            "custom_id": item.custom_id}
    if item.status == "completed":
        return line | {"response": {"status_code": 200, "request_id": request_id,
                                    "body": _body(job, item, request_id)}, "error": None}
    if item.status == "failed":
        error = {"code": item.error_code, "message": item.error_message}
    elif job.status in ("cancelled", "cancelling"):
        error = {"code": "batch_cancelled", "message": "the job was cancelled before this "
                                                       "request ran"}
    else:
        error = {"code": "pending", "message": "this request has not run yet"}
    return line | {"response": None, "error": error}


def _body(job: Job, item: Item, request_id: str) -> dict[str, Any]:
    chat = "messages" in (item.request or {})
    prompt_tokens, completion_tokens = item.prompt_tokens or 0, item.completion_tokens or 0
    choice: dict[str, Any] = {"index": 0, "finish_reason": item.finish_reason,
                              "logprobs": None}
    if item.logprobs is not None:
        render = chat_logprobs if chat else completion_logprobs
        choice["logprobs"] = render(item.logprobs)
    if chat:
        choice["message"] = {"role": "assistant", "content": item.output_text}
    else:
        choice["text"] = item.output_text
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(item.finished_at or job.created_at),
        "model": job.model,
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "metrics": {"nfe": item.nfe,
                    "tokens_per_forward": round(completion_tokens / item.nfe, 3)
                    if item.nfe else None,
                    "latency_s": item.latency_s},
    }
