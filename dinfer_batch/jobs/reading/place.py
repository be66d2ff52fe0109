"""Where jobs in progress stand in their queue, for one job or a page of them: "running"
while a chunk of the job runs, else how many chunks the queue dispatches before its next
one (every queued chunk of higher priority, then fair share's order at its own: see
`fair_share.chunks_before`); None once it has nothing queued.

A read never costs like the queue it looks at (docs/adr/018-tenant-reads-and-webhooks.md):
per queue and priority that the jobs wait at, the other owners' load is summed once in
SQL (a GROUP BY over the level's queued chunks, in the database), per owner its own
waiting jobs are read once, and each job's place is then a closed form over the
owners, never a step-by-step simulation of the chunks ahead of it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.fair_share import (
    CLOCK,
    Level,
    OwnerLoad,
    OwnerTag,
    Waiting,
    chunks_before,
)
from dinfer_batch.statuses import ChunkStatus, JobStatus
from dinfer_batch.storage.tables import Chunk, FairShare, Job

Place = int | str | None


def place(sessions: sessionmaker[Session], job: Job) -> Place:
    return places(sessions, [job])[job.id]


def places(sessions: sessionmaker[Session], jobs: list[Job]) -> dict[str, Place]:
    """Each job's place, by id."""
    found: dict[str, Place] = {job.id: None for job in jobs}
    waiting = [job for job in jobs if job.status == JobStatus.IN_PROGRESS]
    if not waiting:
        return found
    with sessions() as session:
        running = set(session.scalars(select(Chunk.job_id).distinct().where(
            Chunk.job_id.in_([job.id for job in waiting]), Chunk.status == ChunkStatus.RUNNING)))
        levels: dict[tuple[str, int], _Level] = {}
        for job in waiting:
            if job.id in running:
                found[job.id] = "running"
                continue
            key = (job.queue, job.priority)
            if key not in levels:
                levels[key] = _Level.load(session, *key)
            found[job.id] = levels[key].place(session, job)
    return found


def _queued(queue: str, priority: int) -> Any:
    """Queued chunks of the jobs in progress at one queue and priority."""
    return (Chunk.job_id == Job.id, Chunk.status == ChunkStatus.QUEUED,
            Job.status == JobStatus.IN_PROGRESS, Job.queue == queue, Job.priority == priority)


class _Level:
    """One queue and priority, read once for every job of a listing that waits there."""

    def __init__(self, queue: str, priority: int, higher: int, clock: float,
                 tags: dict[str, OwnerTag], loads: dict[str, OwnerLoad]) -> None:
        self.queue, self.priority, self.higher = queue, priority, higher
        self.clock, self.tags, self.loads = clock, tags, loads
        self.jobs: dict[str, list[Waiting]] = {}  # an owner's waiting jobs, once read

    @classmethod
    def load(cls, session: Session, queue: str, priority: int) -> _Level:
        higher = session.scalar(select(func.count()).select_from(Chunk).join(
            Job, Job.id == Chunk.job_id).where(
            Job.status == JobStatus.IN_PROGRESS, Job.queue == queue, Job.priority > priority,
            Chunk.status == ChunkStatus.QUEUED)) or 0
        loads = {owner: OwnerLoad(chunks, int(requests or 0)) for owner, chunks, requests in
                 session.execute(select(Job.owner, func.count(), func.sum(Job.chunk_size))
                                 .select_from(Chunk).join(Job, Job.id == Chunk.job_id)
                                 .where(*_queued(queue, priority)).group_by(Job.owner))}
        rows = session.scalars(select(FairShare).where(
            FairShare.queue == queue, FairShare.priority == priority))
        tags = {row.owner: OwnerTag(row.served, row.job_clock) for row in rows}
        clock = tags.pop(CLOCK, OwnerTag()).served
        return cls(queue, priority, higher, clock, tags, loads)

    def place(self, session: Session, job: Job) -> Place:
        if job.owner not in self.jobs:
            self.jobs[job.owner] = [
                Waiting(row.id, row.owner, row.created_at, row.served, row.chunk_size,
                        row.queued)
                for row in session.execute(
                    select(Job.id, Job.owner, Job.created_at, Job.served, Job.chunk_size,
                           func.count().label("queued"))
                    .select_from(Chunk).join(Job, Job.id == Chunk.job_id)
                    .where(*_queued(self.queue, self.priority), Job.owner == job.owner)
                    .group_by(Job.id, Job.owner, Job.created_at, Job.served,
                              Job.chunk_size))]
        mine = self.jobs[job.owner]
        if job.id not in {waiting.job_id for waiting in mine}:
            return None
        level = Level(self.clock, self.tags, mine)
        return self.higher + chunks_before(level, job.id, self.loads)
