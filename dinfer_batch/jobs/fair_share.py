"""Which job a free worker serves next, among the jobs of one queue and priority that have
queued chunks: fair share across owners, then across each owner's jobs, by start-time
fair queueing (docs/adr/012-dispatch-and-quotas.md).

Each owner carries a virtual time, `served`: the requests dispatched to it, each at its
cost in generations (formats/lines/cost.py: a line of 16 infill candidates counts 16), counted
from where the level's clock stood when it was last picked. The owner with the smallest start
time max(served, clock) goes next (ties by name); the clock moves to that start time and
the owner's `served` to start + the chunk's size. An owner that was idle, or new, starts
at the clock: it gets its fair turn at once but no credit for the time it had no work.
Within an owner its jobs share the same way, on the owner's `job_clock` (ties: the older
job first). This is pure bookkeeping on plain values; jobs/running/dispatch.py reads it from
SQL, picks, and charges the rows after the claim, relative to their values by then."""

from __future__ import annotations

import math
from dataclasses import dataclass

CLOCK = ""  # the owner name under which a level's clock is stored


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

    def pick(self) -> Waiting:
        """The job to serve next (the level must have one)."""
        def owner_start(owner: str) -> tuple[float, str]:
            return max(self._tag(owner).served, self.clock), owner

        owner = min({job.owner for job in self.jobs}, key=owner_start)
        tag = self._tag(owner)
        return min((job for job in self.jobs if job.owner == owner),
                   key=lambda job: (max(job.served, tag.job_clock), job.created_at, job.job_id))

    def charge(self, job: Waiting, cost: int) -> None:
        """Account a chunk of `cost` generations dispatched to `job` (the one `pick`
        chose)."""
        tag = self._tag(job.owner)
        start, job_start = self.starts(job)
        self.clock, tag.served = start, start + cost
        tag.job_clock, job.served = job_start, job_start + cost

    def starts(self, job: Waiting) -> tuple[float, float]:
        """The start times of `job`'s next chunk: its owner's at the level, and its own
        among its owner's jobs."""
        tag = self._tag(job.owner)
        return max(tag.served, self.clock), max(job.served, tag.job_clock)

    def _tag(self, owner: str) -> OwnerTag:
        return self.owners.setdefault(owner, OwnerTag())


@dataclass(frozen=True)
class OwnerLoad:
    """An owner's queued chunks at a level, and the requests they hold (each counted at
    its job's chunk size, as `charge` counts them), summed in SQL."""

    chunks: int
    requests: int


def chunks_before(level: Level, job_id: str, others: dict[str, OwnerLoad]) -> int:
    """How many chunks the level dispatches before `job_id`'s next one if nothing new
    arrives, in closed form, without stepping through them. `level.jobs`: the waiting
    jobs of the job's own owner (with `queued`); `others`: every other owner's load.

    Start-time fair queueing makes each owner's turns a fixed sequence: its first start
    is max(served, clock) (the clock never passes an owner still waiting, since it is the
    smallest start), and each turn starts where the last one ended, start + chunk size;
    the level serves all owners' turns merged by (start, owner). The same holds for an
    owner's jobs on its job clock. So: the owner's chunks before the job's next one are,
    per job, its starts below the job's own; they set the owner-level start T of the
    job's turn; every other owner contributes its turns that start below T (ties by
    name), at its chunks' mean size (exact when its jobs at the level share a chunk size,
    the default)."""
    job = next(waiting for waiting in level.jobs if waiting.job_id == job_id)
    tag = level.owners.get(job.owner, OwnerTag())
    mine = max(job.served, tag.job_clock)
    ahead, cost = 0, 0.0
    for other in level.jobs:
        if other is job or other.owner != job.owner:
            continue
        first = (other.created_at, other.job_id) < (job.created_at, job.job_id)
        count = _starts_before(max(other.served, tag.job_clock), other.chunk_size,
                               other.queued, mine, first)
        ahead, cost = ahead + count, cost + count * other.chunk_size
    turn = max(tag.served, level.clock) + cost
    for owner, load in others.items():
        if owner == job.owner or load.chunks <= 0:
            continue
        start = max(level.owners.get(owner, OwnerTag()).served, level.clock)
        ahead += _starts_before(start, load.requests / load.chunks, load.chunks, turn,
                                owner < job.owner)
    return ahead


def _starts_before(first: float, step: float, count: int, at: float, wins_tie: bool) -> int:
    """How many of the `count` starts first, first + step, ... come before `at` (one
    equal to `at` does when `wins_tie`)."""
    if first > at or count <= 0:
        return 0
    span = (at - first) / max(step, 1e-9)
    below = math.ceil(span)
    return min(count, below + (1 if wins_tie and below == span else 0))
