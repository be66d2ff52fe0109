"""Dispatch: which chunk a free worker runs, and how many messages Redis holds.

A message no longer names a chunk: it is a permit to run the next chunk of its queue,
chosen when a worker takes it (`claim_next_chunk`): the highest priority first, then fair share
across owners and their jobs (jobs/fair_share.py), then the job's lowest queued chunk.
Redis holds a bounded window of permits per queue, one per live worker on it (at least
one), topped up (`top_up`) when a job is made or retried and whenever a chunk ends, and by
every reaper pass, so a lost top-up or a Redis that lost its data stalls nothing. A new
job's first chunk therefore starts as soon as any worker of its queue is free: within one
chunk's run time. SQL stays the only truth: a permit with nothing to claim is a no-op, a
permit too few is made up at the next top-up (docs/adr/012-dispatch-and-quotas.md)."""

from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, Select, bindparam, case, exists, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.expiry import with_status
from dinfer_batch.jobs.fair_share import CLOCK, Level, OwnerTag, Waiting
from dinfer_batch.jobs.running.chunk_state import take
from dinfer_batch.jobs.spec import priority_name
from dinfer_batch.statuses import OPEN_CHUNK, ChunkStatus, JobStatus
from dinfer_batch.storage.db import one_statement_each
from dinfer_batch.storage.registry import live_count_on_queue, live_workers
from dinfer_batch.storage.tables import Chunk, FairShare, Item, Job

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

log = logging.getLogger(__name__)

CLAIM_TRIES = 5  # a chunk taken under us by another worker: choose again


def _has_queued_chunk() -> Any:
    return exists().where(Chunk.job_id == Job.id, Chunk.status == ChunkStatus.QUEUED)


def _waiting_jobs(queue: str) -> Select:
    """The queue's jobs in progress that have a queued chunk, those past their completion
    window left out (the reaper's pass expires them: jobs/expiry.py)."""
    return (select(Job.id, Job.owner, Job.priority, Job.served, Job.created_at,
                   Job.chunk_size)
            .where(with_status(JobStatus.IN_PROGRESS), Job.queue == queue,
                   _has_queued_chunk()))


class _Taken(Exception):
    """Another worker claimed the chosen chunk first: choose again."""


def claim_next_chunk(sessions: sessionmaker[Session], queue: str, worker: str, device: str,
                     worker_timeout: float) -> tuple[str, int, list[Item]] | None:
    """Choose the queue's next chunk, mark it running for `worker` and return (job id,
    chunk id, its pending items in input order) as `chunk_state.claim` does; None when
    the queue has no queued chunk that another claim does not hold.

    A claim waits on no other claim (docs/adr/064-claims-that-do-not-wait.md): the job is
    chosen from the fair-share state as read, its lowest queued chunk that no other claim
    has locked is taken (`SKIP LOCKED` on PostgreSQL; SQLite's writes take turns anyway),
    and the fair share is charged after the claim commits, by single-statement updates
    that add to whatever the rows hold by then. Claims made at the same instant may so
    choose from the same state: fairness holds over the claims that follow, not within one
    burst."""
    passed: set[str] = set()  # jobs whose queued chunks other claims hold: choose another
    for _ in range(CLAIM_TRIES):
        try:
            return _claim_next_chunk(sessions, queue, worker, device, worker_timeout, passed)
        except _Taken:
            continue
    return None


def _claim_next_chunk(sessions: sessionmaker[Session], queue: str, worker: str, device: str,
                      worker_timeout: float, passed: set[str]
                      ) -> tuple[str, int, list[Item]] | None:
    with sessions.begin() as session:
        core = session.connection()  # Core statements: the ORM's per-statement work is not needed
        rows = [row for row in core.execute(_waiting_jobs(queue)) if row.id not in passed]
        if not rows:
            return None
        top = max(row.priority for row in rows)
        level = _read_level(core, queue, top, [r for r in rows if r.priority == top])
        job = level.pick()
        chunk = core.execute(
            select(Chunk.chunk_id, Chunk.cost, Chunk.size)
            .where(Chunk.job_id == job.job_id, Chunk.status == ChunkStatus.QUEUED)
            .order_by(Chunk.chunk_id).limit(1).with_for_update(skip_locked=True)).first()
        if chunk is None:
            passed.add(job.job_id)
            raise _Taken
        items = take(session, job.job_id, chunk.chunk_id, worker, device, worker_timeout)
        if items is None:
            raise _Taken
    try:  # the chunk is this worker's now: a failed charge must not make the claim fail
        _charge(sessions, queue, top, level, job, chunk.cost or chunk.size)
    except SQLAlchemyError as exc:
        log.warning("chunk %s/%d left uncharged to its owner's fair share: %s", job.job_id,
                    chunk.chunk_id, " ".join(str(exc).split())[:300])
    return job.job_id, chunk.chunk_id, items


def _read_level(core: Connection, queue: str, priority: int, rows: list[Any]) -> Level:
    """The level's fair-share state as it stands, locking nothing; a clock or owner with
    no row yet reads as 0 (`_charge` makes the row)."""
    tags = {row.owner: OwnerTag(row.served, row.job_clock) for row in core.execute(
        select(FairShare.owner, FairShare.served, FairShare.job_clock)
        .where(FairShare.queue == queue, FairShare.priority == priority,
               FairShare.owner.in_({CLOCK} | {r.owner for r in rows})))}
    clock = tags.pop(CLOCK, OwnerTag()).served
    jobs = [Waiting(r.id, r.owner, r.created_at, r.served, r.chunk_size) for r in rows]
    return Level(clock, tags, jobs)


def _charge(sessions: sessionmaker[Session], queue: str, priority: int, level: Level,
            job: Waiting, cost: int) -> None:
    """Account `cost` requests dispatched to `job`, as `Level.charge` does, relative to
    what the rows hold when the charge lands: a tag becomes the greater of its value and
    the start that `level` gave, plus the cost; so the charges of claims made together
    add up, in any order. Each of its two statements is a transaction of its own, so the
    job's row and the level's clock (every claim of the queue updates them) are held only
    while a statement runs."""
    start, job_start = level.starts(job)
    with one_statement_each(sessions) as core:
        core.execute(update(Job).where(Job.id == job.job_id)
                     .values(served=_greatest(Job.served, job_start) + cost))
        key = {"queue": queue, "priority": priority, "start": start}
        core.execute(_tag_upsert(core.dialect.name), [
            key | {"owner": CLOCK, "served": start, "job_clock": 0.0},
            key | {"owner": job.owner, "served": start + cost, "job_clock": job_start}])


@cache
def _tag_upsert(dialect: str) -> Any:
    """A fair-share row made at `served` and `job_clock`, or, if it exists, moved by as
    much: its `served` to the greater of it and `start`, plus what `served` is above
    `start` (the clock's 0, an owner's cost), its `job_clock` to the greater of the two.
    Built once per database (bound parameters only, so its compiled form is cached)."""
    start = bindparam("start", type_=Float)
    upsert = (postgresql if dialect == "postgresql" else sqlite).insert(FairShare).values(
        {name: bindparam(name) for name in ("queue", "priority", "owner", "served",
                                            "job_clock")})
    new = upsert.excluded
    return upsert.on_conflict_do_update(
        index_elements=[FairShare.queue, FairShare.priority, FairShare.owner],
        set_={"served": _greatest(FairShare.served, start) + (new.served - start),
              "job_clock": _greatest(FairShare.job_clock, new.job_clock)})


def _greatest(column: Any, value: Any) -> Any:
    """The greater of a column and a value, on every database (SQLite has no GREATEST)."""
    return case((column > value, column), else_=value)


def top_up(sessions: sessionmaker[Session], broker: Broker, queue: str,
           worker_timeout: float) -> int:
    """Publish on `broker` the permits the queue lacks (its window: one per live worker on
    it, at least one; or fewer when fewer chunks are queued; less those already waiting in
    Redis); returns how many were published. One read transaction of two counts."""
    with sessions() as session:
        want = max(1, live_count_on_queue(session, queue, worker_timeout))
        queued = session.scalar(select(func.count()).select_from(
            select(Chunk.chunk_id).join(Job, Job.id == Chunk.job_id)
            .where(Job.status == JobStatus.IN_PROGRESS, Job.queue == queue,
                   Chunk.status == ChunkStatus.QUEUED).limit(want).subquery())) or 0
    missing = min(want, queued) - broker.waiting(queue)
    if missing > 0:
        broker.publish(queue, missing)
    return max(missing, 0)


def queue_summaries(sessions: sessionmaker[Session], broker: Broker, worker_timeout: float
                    ) -> list[dict[str, Any]]:
    """Per queue (those with jobs in progress or live workers): its jobs by priority,
    waiting (queued chunks, none running) and running, its owners, its queued and running
    chunks, the permits waiting in `broker`'s Redis, and its live workers."""

    def chunks(status: ChunkStatus) -> Any:
        return func.sum(case((Chunk.status == status, 1), else_=0)).label(status.value)

    with sessions() as session:
        jobs = session.execute(
            select(Job.queue, Job.priority, Job.owner, chunks(ChunkStatus.QUEUED),
                   chunks(ChunkStatus.RUNNING))
            .join(Chunk, Chunk.job_id == Job.id)
            .where(Job.status == JobStatus.IN_PROGRESS, Chunk.status.in_(OPEN_CHUNK))
            .group_by(Job.id, Job.queue, Job.priority, Job.owner)).all()
    workers = [queue for worker in live_workers(sessions, worker_timeout)
               for queue in worker.queues.split(",")]
    summaries: dict[str, dict[str, Any]] = {
        queue: {"queue": queue, "jobs": {}, "owners": set(), "queued_chunks": 0,
                "running_chunks": 0, "permits_in_redis": broker.waiting(queue),
                "live_workers": workers.count(queue)}
        for queue in sorted({job.queue for job in jobs} | set(workers))}
    for job in sorted(jobs, key=lambda job: -job.priority):
        summary = summaries[job.queue]
        summary["owners"].add(job.owner)
        summary["queued_chunks"] += job.queued
        summary["running_chunks"] += job.running
        counts = summary["jobs"].setdefault(priority_name(job.priority),
                                            {"waiting": 0, "running": 0})
        counts["running" if job.running else "waiting"] += 1
    return [summary | {"owners": sorted(summary["owners"])} for summary in summaries.values()]
