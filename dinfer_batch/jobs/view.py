"""A job as the OpenAI Batch object (plus our fields), and its progress figures."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dinfer_batch.storage.tables import Job

TIMESTAMPS = ("created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
              "cancelling_at", "cancelled_at")


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    tokens_per_s: float
    items_per_s: float
    eta_s: float | None


def progress(job: Job) -> Progress:
    done = job.completed_count + job.failed_count
    started = job.in_progress_at or job.created_at
    ended = job.completed_at or job.failed_at or job.cancelled_at
    elapsed = max((ended or time.time()) - started, 1e-9)
    items_per_s = done / elapsed
    remaining = job.total_count - done
    eta = remaining / items_per_s if items_per_s and not ended else None
    return Progress(done, job.total_count, job.completion_tokens / elapsed, items_per_s, eta)


def job_object(job: Job) -> dict[str, Any]:
    figures = progress(job)
    return {
        "id": job.id,
        "object": "batch",
        "input_file": job.input_file,
        "model": job.model,
        "status": job.status,
        "errors": {"data": [{"message": job.error}]} if job.error else None,
        "request_counts": {"total": job.total_count, "completed": job.completed_count,
                           "failed": job.failed_count},
        "deduplicated": job.deduplicated_count,  # lines that got an identical line's result
        "usage": {"prompt_tokens": job.prompt_tokens,
                  "completion_tokens": job.completion_tokens,
                  "total_tokens": job.prompt_tokens + job.completion_tokens},
        "metadata": job.meta,
        "params": job.params,
        "seed_base": job.seed_base,
        "queue": job.queue,
        "chunks": job.chunk_count,
        "tokens_per_second": round(figures.tokens_per_s, 2),
        "eta_seconds": None if figures.eta_s is None else round(figures.eta_s, 1),
        **{name: _int_time(getattr(job, name)) for name in TIMESTAMPS},
    }


def _int_time(value: float | None) -> int | None:
    return None if value is None else int(value)
