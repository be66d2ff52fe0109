"""SQLAlchemy models: a job (the OpenAI Batch object), its items (one per input line) and
its chunks (the unit of queueing, with per-chunk engine metrics); schedules and their runs;
the HTTP API's keys and uploaded files; webhook endpoints, the events of jobs that ended
and their deliveries. Every job, file and endpoint has an owner (an API key's owner;
`local` for the CLI).
Times are Unix seconds."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from dinfer_batch.statuses import ItemStatus
from dinfer_batch.storage.service_text import ServiceText

LOCAL_OWNER = "local"
# the condition of the failed items' partial index, spelt out for the planners to match it
ITEMS_FAILED = f"status = '{ItemStatus.FAILED}'"
ITEMS_DUPLICATES = "duplicate_of IS NOT NULL"

# A model's answer, exactly: it may hold a NUL (a byte-fallback token decodes to one), which
# PostgreSQL's text type refuses; there it is a JSON string, whose escape \u0000 the json
# type keeps (jsonb would not). SQLite's text holds a NUL as it is (ADR 053, migration 0020).
MODEL_TEXT = Text().with_variant(JSON(none_as_null=True), "postgresql")
# Text the service writes itself (errors, reasons) is ServiceText: a NUL or a lone
# surrogate from an exception's message is stored as U+FFFD (ADR 055).


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (  # newest first, of everyone or of one owner (migration 0011)
        Index("ix_jobs_created", "created_at", "id"),
        Index("ix_jobs_owner_created", "owner", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    model: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(String(200))
    input_file: Mapped[str] = mapped_column(Text)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    meta: Mapped[dict[str, str]] = mapped_column("metadata", JSON)
    chunk_size: Mapped[int] = mapped_column(Integer)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    # sample i of line L uses seed `seed + i`, `seed` the line's own or seed_base + 128 L
    seed_base: Mapped[int] = mapped_column(BigInteger, default=0)
    deduplicated_count: Mapped[int] = mapped_column(Integer, default=0)
    # request lines whose body named another model than the job's: name -> lines
    other_models: Mapped[dict[str, int] | None] = mapped_column(JSON)
    total_count: Mapped[int] = mapped_column(Integer, default=0)
    completed_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_count: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str | None] = mapped_column(ServiceText)
    created_at: Mapped[float] = mapped_column(Float)
    in_progress_at: Mapped[float | None] = mapped_column(Float)
    finalizing_at: Mapped[float | None] = mapped_column(Float)
    completed_at: Mapped[float | None] = mapped_column(Float)
    failed_at: Mapped[float | None] = mapped_column(Float)
    cancelling_at: Mapped[float | None] = mapped_column(Float)
    cancelled_at: Mapped[float | None] = mapped_column(Float)
    owner: Mapped[str] = mapped_column(String(200), index=True, default=LOCAL_OWNER)
    endpoint: Mapped[str | None] = mapped_column(String(64))
    input_file_id: Mapped[str | None] = mapped_column(String(64))
    completion_window: Mapped[str | None] = mapped_column(String(16))
    expires_at: Mapped[float | None] = mapped_column(Float)
    expired_at: Mapped[float | None] = mapped_column(Float)
    # results are deleted this long after the job ends (OpenAI's output_expires_after)
    output_expires_after: Mapped[int | None] = mapped_column(Integer)
    # when its requests and results were deleted (`delete`, retention); the row stays
    purged_at: Mapped[float | None] = mapped_column(Float, index=True)
    # higher runs strictly first (low -1, normal 0, high 1); `served`: this job's virtual
    # time among its owner's jobs (jobs/fair_share.py); `enqueued_tokens`: prompt + max
    # tokens of its unfinished requests, counted when its owner has a token limit
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    served: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    enqueued_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # prompt tokens of its lines that the workers' prefix caches gave back (migration 0019)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # the generations its lines that run cost (formats/lines/cost.py; migration 0016)
    cost: Mapped[int | None] = mapped_column(BigInteger)
    # the sizes of its result files, measured once when it ends (jobs/reading/result_sizes.py)
    output_bytes: Mapped[int | None] = mapped_column(BigInteger)
    error_bytes: Mapped[int | None] = mapped_column(BigInteger)


class Item(Base):
    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("job_id", "custom_id", name="uq_items_job_custom_id"),
        Index("ix_items_job_chunk", "job_id", "chunk_id"),
        # the failed items only, for the dashboard's first failures (migration 0011)
        Index("ix_items_failed", "job_id", "line", sqlite_where=text(ITEMS_FAILED),
              postgresql_where=text(ITEMS_FAILED)),
        # the duplicates only, which a result write copies to (migration 0021)
        Index("ix_items_duplicates", "job_id", "duplicate_of",
              sqlite_where=text(ITEMS_DUPLICATES), postgresql_where=text(ITEMS_DUPLICATES)),
    )

    # no foreign key to jobs: checking one per row slowed bulk writes (migration 0005)
    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    custom_id: Mapped[str | None] = mapped_column(Text)
    chunk_id: Mapped[int | None] = mapped_column(Integer)
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    # the first line with the same request: it runs, this one gets a copy of its result
    duplicate_of: Mapped[int | None] = mapped_column(Integer)
    output_text: Mapped[str | None] = mapped_column(MODEL_TEXT)
    # every sample (text, finish_reason, completion_tokens, nfe, latency_s) when n > 1
    samples: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    nfe: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Float)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(ServiceText)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    finished_at: Mapped[float | None] = mapped_column(Float)
    # [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}] when asked for
    logprobs: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # prompt tokens + max tokens of all samples, when the owner has a token limit
    tokens: Mapped[int | None] = mapped_column(Integer)
    # the editing decoder's counts, summed over samples (migration 0015); NULL otherwise
    edited_tokens: Mapped[int | None] = mapped_column(Integer)
    post_steps: Mapped[int | None] = mapped_column(Integer)
    # what the request costs, in generations (formats/lines/cost.py; migration 0016)
    cost: Mapped[int | None] = mapped_column(BigInteger)
    # prompt tokens the prefix cache gave back, summed over samples (migration 0017; ADR
    # 028); NULL where no cache ran
    prefix_tokens_reused: Mapped[int | None] = mapped_column(Integer)


class Chunk(Base):
    __tablename__ = "chunks"
    # a job's next queued chunk, found without reading its finished ones
    __table_args__ = (Index("ix_chunks_job_status", "job_id", "status", "chunk_id"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(Integer)
    # its generations (its lines' costs, formats/lines/cost.py): what fair share charges and
    # quotas count; None: size
    cost: Mapped[int | None] = mapped_column(BigInteger)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(Text)
    device: Mapped[str | None] = mapped_column(String(64))
    batch_sizes: Mapped[list[int] | None] = mapped_column(JSON)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    forwards: Mapped[int] = mapped_column(BigInteger, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class Worker(Base):
    """One worker process, as its heartbeats describe it. `id` is unique per process (a
    restarted replica keeps its name but gets a new id), and is what a chunk's `worker`
    holds while the process runs it."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(Text)
    device: Mapped[str] = mapped_column(String(64))
    queues: Mapped[str] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(String(64))
    chunk_id: Mapped[int | None] = mapped_column(Integer)
    items_done: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens_per_s: Mapped[float] = mapped_column(Float, default=0.0)
    # prompt tokens its engine's prefix cache gave back since it started (ADR 028)
    prefix_tokens_reused: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)
    stopped_at: Mapped[float | None] = mapped_column(Float)


class Lease(Base):
    """A fleet-wide duty (the reaper's passes) held by one process at a time until
    `expires_at`; the holder renews it, anyone takes it once it has expired
    (storage/leases.py, docs/adr/057-fleet-work-once.md)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    expires_at: Mapped[float] = mapped_column(Float)


class Schedule(Base):
    """A job made again and again: `spec` is what `submit` would be given (input, model,
    options), `trigger` a cron expression or an interval."""

    __tablename__ = "schedules"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    trigger_kind: Mapped[str] = mapped_column(String(8))  # "cron" or "every"
    trigger: Mapped[str] = mapped_column(String(200))
    seed_base: Mapped[int] = mapped_column(BigInteger, default=0)
    same_seeds: Mapped[bool] = mapped_column(Boolean, default=False)
    overlap: Mapped[bool] = mapped_column(Boolean, default=False)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    next_run_at: Mapped[float] = mapped_column(Float)
    last_run_at: Mapped[float | None] = mapped_column(Float)


class ScheduleRun(Base):
    """One due time of a schedule. Unique per (schedule, due time), so two scheduler
    processes never make the same run twice; `job_id` is the job it made, or `reason` why
    it was skipped."""

    __tablename__ = "schedule_runs"
    __table_args__ = (UniqueConstraint("schedule", "due_at", name="uq_schedule_runs_due"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule: Mapped[str] = mapped_column(ForeignKey("schedules.name", ondelete="CASCADE"),
                                          index=True)
    due_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # dinfer_batch.statuses.RunStatus
    job_id: Mapped[str | None] = mapped_column(String(64))
    seed_base: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(ServiceText)
    created_at: Mapped[float] = mapped_column(Float)


class ApiKey(Base):
    """An API key: only the SHA-256 of its secret is kept."""

    __tablename__ = "api_keys"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    # an admin key sees every owner's jobs and the fleet (metrics, dashboard)
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # the owner's quotas (jobs/intake/quota.py); None: the DINFER_BATCH_MAX_ENQUEUED_* default
    max_enqueued_requests: Mapped[int | None] = mapped_column(BigInteger)
    max_enqueued_tokens: Mapped[int | None] = mapped_column(BigInteger)
    # the owner's entitlements (jobs/intake/entitlements.py); None: the service's default
    max_priority: Mapped[int | None] = mapped_column(BigInteger)
    max_chunk_size: Mapped[int | None] = mapped_column(BigInteger)
    max_request_tokens: Mapped[int | None] = mapped_column(BigInteger)
    max_batch_requests: Mapped[int | None] = mapped_column(BigInteger)
    # an administrator's grant: the owner's lines share cached prompt blocks with every
    # owner granted the same name (jobs/running/cache_scopes.py); None: with no other owner
    shared_cache_salt: Mapped[str | None] = mapped_column(String(64))


class FairShare(Base):
    """Fair-share dispatch state of one queue and priority (jobs/fair_share.py): per owner
    its virtual time (`served`, in requests dispatched) and its jobs' clock; the row of
    owner '' holds the level's own clock."""

    __tablename__ = "fair_shares"

    queue: Mapped[str] = mapped_column(String(200), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    served: Mapped[float] = mapped_column(Float, default=0.0)
    job_clock: Mapped[float] = mapped_column(Float, default=0.0)


class File(Base):
    """An uploaded file (`POST /v1/files`); its bytes live under the files directory."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_owner_created", "owner", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    filename: Mapped[str] = mapped_column(Text)
    purpose: Mapped[str] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, index=True)  # expires_after


class WebhookEndpoint(Base):
    """Where the events of an owner's jobs are sent. `secret` (whsec_...) signs them, so it
    is kept as it is (it cannot be a hash); `events` is a comma-separated list."""

    __tablename__ = "webhook_endpoints"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
    # held by the sender that is sending to it (webhooks/sender.py): one at a time
    claimed_until: Mapped[float | None] = mapped_column(Float)


class WebhookEvent(Base):
    """A job that ended (`batch.completed`, ...), recorded in the transaction that ended it."""

    __tablename__ = "webhook_events"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[float] = mapped_column(Float)


class WebhookDelivery(Base):
    """One event for one endpoint: `pending` until an attempt gets a 2xx (`delivered`) or
    24 h have passed (`failed`). `next_attempt_at` is also the sender's claim."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "endpoint_id", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_endpoint_due", "endpoint_id", "status",
              "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(64))
    endpoint_id: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(ServiceText)
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)


class WebhookAttempt(Base):
    """One POST of a delivery: the HTTP status, or the error (timeout, refused)."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(Integer, index=True)
    attempted_at: Mapped[float] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(ServiceText)
    seconds: Mapped[float] = mapped_column(Float)


class ResultPage(Base):
    """One page of an ended job's result files (jobs/reading/result_pages.py): the bytes and
    SHA-256 of its lines in each file (all lines, successes, failures), recorded the first
    time the page is read, for the content `version` of the job it was read from. Ranged
    and resumed downloads seek through these without reading the items before them."""

    __tablename__ = "result_pages"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[str] = mapped_column(String(128), primary_key=True)
    page: Mapped[int] = mapped_column(Integer, primary_key=True)
    all_bytes: Mapped[int] = mapped_column(BigInteger)
    output_bytes: Mapped[int] = mapped_column(BigInteger)
    errors_bytes: Mapped[int] = mapped_column(BigInteger)
    all_sha256: Mapped[str] = mapped_column(String(64))
    output_sha256: Mapped[str] = mapped_column(String(64))
    errors_sha256: Mapped[str] = mapped_column(String(64))
