"""Which job a free worker serves next, among the jobs of one queue and priority that have
queued chunks: fair share across owners, then across each owner's jobs, by start-time
fair queueing (docs/adr/012-dispatch-and-quotas.md).

Each owner carries a virtual time, `served`: the requests dispatched to it, counted from
where the level's clock stood when it was last picked. The owner with the smallest start
time max(served, clock) goes next (ties by name); the clock moves to that start time and
the owner's `served` to start + the chunk's size. An owner that was idle, or new, starts
at the clock: it gets its fair turn at once but no credit for the time it had no work.
Within an owner its jobs share the same way, on the owner's `job_clock` (ties: the older
job first). This is pure bookkeeping on plain values; jobs/dispatch.py loads it from SQL,
picks, and writes the changed tags back in the claim's transaction."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OwnerTag:
    served: float = 0.0
    job_clock: float = 0.0


@dataclass
class Waiting:
    """A job with queued chunks."""

    job_id: str
    owner: str
    created_at: float
    served: float
    chunk_size: int
    queued: int = 1  # queued chunks (only `chunks_ahead` needs the count)


@dataclass
class Level:
    clock: float
    owners: dict[str, OwnerTag]
    jobs: list[Waiting]
    changed: set[str] = field(default_factory=set)  # owners whose tags moved

    def pick(self) -> Waiting:
        """The job to serve next (the level must have one)."""
        def owner_start(owner: str) -> tuple[float, str]:
            return max(self._tag(owner).served, self.clock), owner

        owner = min({job.owner for job in self.jobs}, key=owner_start)
        tag = self._tag(owner)
        return min((job for job in self.jobs if job.owner == owner),
                   key=lambda job: (max(job.served, tag.job_clock), job.created_at, job.job_id))

    def charge(self, job: Waiting, cost: int) -> None:
        """Account a chunk of `cost` requests dispatched to `job` (the one `pick` chose)."""
        tag = self._tag(job.owner)
        start = max(tag.served, self.clock)
        self.clock, tag.served = start, start + cost
        job_start = max(job.served, tag.job_clock)
        tag.job_clock, job.served = job_start, job_start + cost
        self.changed.add(job.owner)

    def _tag(self, owner: str) -> OwnerTag:
        return self.owners.setdefault(owner, OwnerTag())


def chunks_ahead(level: Level, job_id: str, limit: int = 10_000) -> int:
    """How many chunks this level dispatches before `job_id`'s next one if nothing new
    arrives (on a copy: `level` is left as it was); at most `limit`."""
    jobs = [Waiting(**vars(job)) for job in level.jobs]
    copy = Level(level.clock, {o: OwnerTag(t.served, t.job_clock)
                               for o, t in level.owners.items()}, jobs)
    for ahead in range(limit):
        job = copy.pick()
        if job.job_id == job_id:
            return ahead
        copy.charge(job, job.chunk_size)
        job.queued -= 1
        if job.queued <= 0:
            copy.jobs.remove(job)
    return limit
