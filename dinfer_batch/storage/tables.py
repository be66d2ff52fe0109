"""SQLAlchemy models: a job (the OpenAI Batch object), its items (one per input line) and
its chunks (the unit of queueing, with per-chunk engine metrics). Times are Unix seconds."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Job(Base):
    __tablename__ = "jobs"

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
    total_count: Mapped[int] = mapped_column(Integer, default=0)
    completed_count: Mapped[int] = mapped_column(Integer, default=0)
    failed_count: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    in_progress_at: Mapped[float | None] = mapped_column(Float)
    finalizing_at: Mapped[float | None] = mapped_column(Float)
    completed_at: Mapped[float | None] = mapped_column(Float)
    failed_at: Mapped[float | None] = mapped_column(Float)
    cancelling_at: Mapped[float | None] = mapped_column(Float)
    cancelled_at: Mapped[float | None] = mapped_column(Float)


class Item(Base):
    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("job_id", "custom_id", name="uq_items_job_custom_id"),
        Index("ix_items_job_chunk", "job_id", "chunk_id"),
    )

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    custom_id: Mapped[str | None] = mapped_column(Text)
    chunk_id: Mapped[int | None] = mapped_column(Integer)
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    output_text: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    nfe: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Float)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    finished_at: Mapped[float | None] = mapped_column(Float)


class Chunk(Base):
    __tablename__ = "chunks"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(Integer)
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
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)
    stopped_at: Mapped[float | None] = mapped_column(Float)
