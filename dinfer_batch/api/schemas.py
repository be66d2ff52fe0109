"""The request and response bodies, as OpenAI's Files and Batches API defines them, so
that /openapi.json describes what the server really answers (the tests hold it to that)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dinfer_batch.statuses import JobStatus

ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/responses")


def list_page(objects: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's list object for one page; `objects` holds up to limit + 1 items, the extra
    one only telling that another page follows."""
    data = objects[:limit]
    return {"object": "list", "data": data, "has_more": len(objects) > limit,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["uploaded", "processed"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class ExpiresAfter(BaseModel):
    """OpenAI's expiration policy: deleted `seconds` after the anchor (for a batch's
    output_expires_after, the moment its result files appear: the batch's end)."""

    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=30 * 86400, strict=True)  # `true` is not 1


class BatchCreate(BaseModel):
    """OpenAI's fields, then ours. Any other field is a generation default for every line
    (`max_tokens`, `decoder`, `temperature`, ...; see `dinfer-batch submit --help`), which is
    how the `openai` client's `extra_body` passes them."""

    model_config = ConfigDict(extra="allow")

    input_file_id: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    endpoint: Literal["/v1/completions", "/v1/chat/completions", "/v1/responses"]
    completion_window: str = Field(max_length=16,
                                   description='"24h" (OpenAI\'s only value), or any '
                                               '<N>s, <N>m, <N>h, <N>d up to 7d')
    metadata: dict[str, str] | None = Field(None, max_length=16)
    model: str | None = Field(None, max_length=1000,
                              description="A model the server offers (its path or "
                                          "directory name); default: the server's")
    chunk_size: int | None = Field(None, ge=1, le=100_000, strict=True)  # `true` is not 1
    output_expires_after: ExpiresAfter | None = None


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchErrorItem(BaseModel):
    code: str | None = None
    line: int | None = None
    message: str | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchErrorItem]


class InputTokensDetails(BaseModel):
    cached_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class BatchUsage(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class Batch(BaseModel):
    """OpenAI's Batch object; our extra fields (params, queue, tokens_per_second, ...)
    come along."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["batch"]
    endpoint: str
    input_file_id: str
    completion_window: str
    status: JobStatus  # OpenAI's batch statuses, which are the jobs' (statuses.py)
    output_file_id: str | None
    error_file_id: str | None
    errors: BatchErrors | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    usage: BatchUsage
    metadata: dict[str, str] | None
    model: str


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Batch]
    first_id: str | None
    last_id: str | None
    has_more: bool
