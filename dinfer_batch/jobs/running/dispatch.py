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

from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, case, exists, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.expiry import with_status
from dinfer_batch.jobs.fair_share import CLOCK, Level, OwnerTag, Waiting
from dinfer_batch.jobs.running.chunk_state import take
from dinfer_batch.jobs.spec import priority_name
from dinfer_batch.statuses import OPEN_CHUNK, ChunkStatus, JobStatus
from dinfer_batch.storage.registry import live_count_on_queue, live_workers
from dinfer_batch.storage.tables import Chunk, FairShare, Item, Job

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

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
    """Another worker claimed the chosen chunk first: undo the charge, choose again."""


def claim_next_chunk(sessions: sessionmaker[Session], queue: str, worker: str, device: str,
                     worker_timeout: float) -> tuple[str, int, list[Item]] | None:
    """Choose the queue's next chunk, mark it running for `worker` and return (job id,
    chunk id, its pending items in input order) as `chunk_state.claim` does; None when
    the queue has no queued chunk. The job's row is written before the chunk's, the
    order cancel and expiry lock them in."""
    for _ in range(CLAIM_TRIES):
        try:
            return _claim_next_chunk(sessions, queue, worker, device, worker_timeout)
        except _Taken:
            continue
    return None


def _claim_next_chunk(sessions: sessionmaker[Session], queue: str, worker: str, device: str,
                      worker_timeout: float) -> tuple[str, int, list[Item]] | None:
    with sessions.begin() as session:
        rows = session.execute(_waiting_jobs(queue)).all()
        if not rows:
            return None
        top = max(row.priority for row in rows)
        level = _load_level(session, queue, top, [r for r in rows if r.priority == top])
        job = level.pick()
        chunk = session.execute(
            select(Chunk.chunk_id, Chunk.size, Chunk.cost)
            .where(Chunk.job_id == job.job_id, Chunk.status == ChunkStatus.QUEUED)
            .order_by(Chunk.chunk_id).limit(1)).first()
        if chunk is None:
            raise _Taken
        level.charge(job, chunk.cost or chunk.size)  # its lines at their cost
        _store_level(session, queue, top, level, job)
        items = take(session, job.job_id, chunk.chunk_id, worker, device, worker_timeout)
        if items is None:
            raise _Taken  # rolls the charge back
        return job.job_id, chunk.chunk_id, items


def _load_level(session: Session, queue: str, priority: int, rows: list[Any]) -> Level:
    """The level's state, its clock row made if missing and locked (on PostgreSQL), so
    that the claims of one queue and priority choose one after the other (SQLite's
    transactions take the write lock up front anyway)."""
    _insert_missing(session, {"queue": queue, "priority": priority, "owner": CLOCK,
                              "served": 0.0, "job_clock": 0.0})
    clock = session.scalar(select(FairShare.served).where(
        FairShare.queue == queue, FairShare.priority == priority, FairShare.owner == CLOCK)
        .with_for_update())
    owners = {row.owner: OwnerTag(row.served, row.job_clock) for row in session.scalars(
        select(FairShare).where(FairShare.queue == queue, FairShare.priority == priority,
                                FairShare.owner.in_({r.owner for r in rows})))}
    jobs = [Waiting(r.id, r.owner, r.created_at, r.served, r.chunk_size) for r in rows]
    return Level(clock or 0.0, owners, jobs)


def _store_level(session: Session, queue: str, priority: int, level: Level,
                 job: Waiting) -> None:
    session.execute(update(Job).where(Job.id == job.job_id).values(served=job.served))
    key = (FairShare.queue == queue, FairShare.priority == priority)
    session.execute(update(FairShare).where(*key, FairShare.owner == CLOCK)
                    .values(served=level.clock))
    for owner in level.changed:
        tag = level.owners[owner]
        _insert_missing(session, {"queue": queue, "priority": priority, "owner": owner,
                                  "served": tag.served, "job_clock": tag.job_clock})
        session.execute(update(FairShare).where(*key, FairShare.owner == owner)
                        .values(served=tag.served, job_clock=tag.job_clock))


def _insert_missing(session: Session, row: dict[str, Any]) -> None:
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(FairShare).values(**row).on_conflict_do_nothing())


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
