"""A job as the OpenAI Batch object (plus our fields), and its progress figures.

An ended job's results are two virtual files, `file-<hex>-output` (the lines that
succeeded) and `file-<hex>-errors` (the rest): the lines `dinfer-batch results --errors`
writes, served from SQL, never stored twice."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dinfer_batch.jobs.spec import priority_name
from dinfer_batch.model_info import public_name
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Job

TIMESTAMPS = ("created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
              "cancelling_at", "cancelled_at", "expires_at", "expired_at")
RESULT_FILES = {"output": False, "errors": True}  # file kind -> holds the failed lines
# what a job keeps of the model names its lines gave (a line's string is the client's:
# a batch object stays small whatever the lines held)
MODEL_NAMES_KEPT, MODEL_NAME_CHARS = 10, 100
OTHER_NAMES = "(other names)"


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


def result_file_id(job: Job, kind: str) -> str | None:
    """The id of the job's `output` or `errors` file, once the job has ended and has such
    lines (as OpenAI: no output file when nothing succeeded)."""
    lines = job.completed_count if kind == "output" else job.total_count - job.completed_count
    if job.status not in ENDED or not lines:
        return None
    return f"file-{job.id.removeprefix('batch_')}-{kind}"


def parse_result_file_id(file_id: str) -> tuple[str, bool] | None:
    """`file-<hex>-output` -> ("batch_<hex>", False): the job, and whether the file holds
    the failed lines. None for any other id."""
    stem, _, kind = file_id.removeprefix("file-").rpartition("-")
    if not file_id.startswith("file-") or kind not in RESULT_FILES or not stem:
        return None
    return f"batch_{stem}", RESULT_FILES[kind]


def job_object(job: Job, place: int | str | None = None,
               for_client: bool = False) -> dict[str, Any]:
    """`place` (jobs/reading/place.py): "running", or the chunks its queue dispatches before
    this job's next one; None when it has nothing queued. `for_client` (the HTTP API):
    nothing of the server's paths, no `input_file` (`input_file_id` names the upload) and
    the model by its public name (model_info.public_name); the CLI's operator sees both."""
    figures = progress(job)
    model = public_name(job.model) if for_client else job.model
    shown = {
        "id": job.id,
        "object": "batch",
        "endpoint": job.endpoint or "",
        "input_file_id": job.input_file_id or "",
        "completion_window": job.completion_window or "",
        "output_file_id": result_file_id(job, "output"),
        "error_file_id": result_file_id(job, "errors"),
        "input_file": job.input_file,
        "model": model,
        "status": job.status,
        "errors": {"object": "list", "data": [{"message": job.error}]} if job.error else None,
        "request_counts": {"total": job.total_count, "completed": job.completed_count,
                           "failed": job.failed_count},
        "deduplicated": job.deduplicated_count,  # lines that got an identical line's result
        # lines that named another model, by name
        "other_models": kept_model_names(job.other_models or {}),
        "notes": notes(job, model),
        "usage": {"input_tokens": job.prompt_tokens, "output_tokens": job.completion_tokens,
                  "total_tokens": job.prompt_tokens + job.completion_tokens,
                  "input_tokens_details": {"cached_tokens": job.cached_tokens or 0},
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "prompt_tokens": job.prompt_tokens,
                  "completion_tokens": job.completion_tokens,
                  # the generations its lines that run are counted at (formats/lines/cost.py)
                  **({} if job.cost is None else {"cost": job.cost})},
        "owner": job.owner,
        "metadata": job.meta,
        "params": job.params,
        "seed_base": job.seed_base,
        "queue": job.queue,
        "priority": priority_name(job.priority),
        "place": place,
        "chunks": job.chunk_count,
        "tokens_per_second": round(figures.tokens_per_s, 2),
        "eta_seconds": None if figures.eta_s is None else round(figures.eta_s, 1),
        # requests and results deleted (`delete`, output_expires_after, retention)
        "purged_at": _int_time(job.purged_at),
        **({} if job.output_expires_after is None else {"output_expires_after": {
            "anchor": "created_at", "seconds": job.output_expires_after}}),
        **{name: _int_time(getattr(job, name)) for name in TIMESTAMPS},
        "created_at": int(job.created_at),
    }
    if for_client:
        del shown["input_file"]
    return shown


def kept_model_names(counts: dict[str, int]) -> dict[str, int]:
    """The MODEL_NAMES_KEPT names most lines gave, each cut to MODEL_NAME_CHARS, the rest
    counted under OTHER_NAMES: what the job row keeps (jobs/intake/ingest.py) and what a batch
    object shows (rows written before the bound are cut on read)."""
    kept: dict[str, int] = {}
    ranked = sorted(((name, count) for name, count in counts.items() if name != OTHER_NAMES),
                    key=lambda pair: (-pair[1], pair[0]))
    for name, count in ranked[:MODEL_NAMES_KEPT]:
        name = name if len(name) <= MODEL_NAME_CHARS else name[:MODEL_NAME_CHARS] + "..."
        kept[name] = kept.get(name, 0) + count
    rest = counts.get(OTHER_NAMES, 0) + sum(count for _, count in ranked[MODEL_NAMES_KEPT:])
    return kept | ({OTHER_NAMES: rest} if rest else {})


def notes(job: Job, model: str | None = None) -> list[str]:
    """What the counts alone do not say: lines that named another model ran on the job's
    (`model`: as it is shown)."""
    others = kept_model_names(job.other_models or {})
    if not others:
        return []
    count = sum(others.values())
    names = ", ".join(sorted(others, key=lambda name: -others[name]))
    return [f"{count} request{'s' if count != 1 else ''} named another model ({names}); "
            f"ran on {model or job.model}"]


def _int_time(value: float | None) -> int | None:
    return None if value is None else int(value)
