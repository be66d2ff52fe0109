"""The dashboard's aggregates that no CLI command prints: each is one indexed query that
counts or sums in SQL, never a scan of a job's items. Callers check ownership first
(`get_job` with the caller's owner) and pass the job they got."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, func, select, text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.functions import GenericFunction

from dinfer_batch.jobs.spec import priority_name
from dinfer_batch.statuses import ENDED, ChunkStatus, JobStatus
from dinfer_batch.storage.tables import ITEMS_FAILED, Chunk, Item, Job

FIRST_FAILURES = 10


class bucket(GenericFunction[int]):  # noqa: N801 (SQL function names are lower case)
    """floor() of a non-negative number: a cast on SQLite (whose floor() needs the optional
    math functions), floor() elsewhere (PostgreSQL's cast rounds)."""

    type = Integer()
    inherit_cache = True


@compiles(bucket)
def _floor(element: bucket, compiler: Any, **kw: Any) -> str:
    return f"CAST(floor({compiler.process(element.clauses, **kw)}) AS INTEGER)"


@compiles(bucket, "sqlite")
def _floor_sqlite(element: bucket, compiler: Any, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS INTEGER)"


@dataclass(frozen=True)
class Timeline:
    """Requests done and tokens generated per time bucket since the job was created, from
    its finished chunks (a chunk's requests count when the chunk ends)."""

    start: float
    width: float  # seconds per bucket
    done: list[int]
    tokens: list[int]


def timeline(sessions: sessionmaker[Session], job: Job, buckets: int = 60) -> Timeline | None:
    """None until a chunk has finished. The job's chunks are found through the chunks'
    primary key (job_id, chunk_id): a 1,000,000-request job has ~4,000 chunks of 256."""
    finished = (Chunk.job_id == job.id, Chunk.status == ChunkStatus.DONE,
                Chunk.finished_at >= job.created_at)
    with sessions() as session:
        last = session.scalar(select(func.max(Chunk.finished_at)).where(*finished))
        if last is None:
            return None
        end = last if job.status in ENDED else max(last, time.time())
        width = max((end - job.created_at) / buckets, 1.0)
        index = bucket((Chunk.finished_at - job.created_at) / width)
        rows = session.execute(
            select(index, func.sum(Chunk.size), func.sum(Chunk.completion_tokens))
            .where(*finished).group_by(index)).all()
    count = int((end - job.created_at) / width) + 1
    done, tokens = [0] * count, [0] * count
    for position, size, generated in rows:
        done[min(position, count - 1)] += int(size or 0)
        tokens[min(position, count - 1)] += int(generated or 0)
    return Timeline(job.created_at, width, done, tokens)


@dataclass(frozen=True)
class Failure:
    line: int
    custom_id: str | None
    code: str | None
    message: str | None


def first_failures(sessions: sessionmaker[Session], job: Job,
                   limit: int = FIRST_FAILURES) -> list[Failure]:
    """The failed requests with the lowest line numbers, through the partial index
    ix_items_failed (migration 0011): its condition as a literal (tables.ITEMS_FAILED), as
    a bound parameter would keep the planners from matching it."""
    if not job.failed_count:
        return []
    query = (select(Item.line, Item.custom_id, Item.error_code, Item.error_message)
             .where(Item.job_id == job.id, text(ITEMS_FAILED))
             .order_by(Item.line).limit(limit))
    with sessions() as session:
        return [Failure(*row) for row in session.execute(query)]


def priority_of(job: Job) -> str:
    """The job's priority by name (`high`), or its number where it has no name."""
    return priority_name(job.priority)


@dataclass(frozen=True)
class Waiting:
    queue: str
    priority: str
    jobs: int
    chunks: int


def waiting(sessions: sessionmaker[Session]) -> list[Waiting]:
    """Queued chunks per queue and priority, of the jobs in progress (found through the
    jobs' status index, their chunks through the chunks' primary key)."""
    query = (select(Job.queue, Job.priority, func.count(func.distinct(Job.id)), func.count())
             .select_from(Job).join(Chunk, Chunk.job_id == Job.id)
             .where(Job.status == JobStatus.IN_PROGRESS, Chunk.status == ChunkStatus.QUEUED)
             .group_by(Job.queue, Job.priority).order_by(Job.queue, Job.priority))
    with sessions() as session:
        rows = session.execute(query).all()
    return [Waiting(row[0], priority_name(row[1]), row[2], row[3]) for row in rows]


def status_counts(sessions: sessionmaker[Session], owner: str | None) -> dict[str, int]:
    """Jobs per status (of one owner, or all), for the filter's labels."""
    query = select(Job.status, func.count()).group_by(Job.status)
    if owner is not None:
        query = query.where(Job.owner == owner)
    with sessions() as session:
        return {status: count for status, count in session.execute(query)}
