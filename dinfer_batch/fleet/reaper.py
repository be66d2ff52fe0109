"""The reaper: re-queues the chunks of dead workers, tops up every busy queue's permits
in Redis (jobs/running/dispatch.py) and expires the jobs past their window (jobs/expiry.py), from
what SQL says, so that a lost top-up or a Redis that lost its data stalls nothing. A
thread in every worker and in the beat process asks for the fleet's reaper lease
(storage/leases.py) and makes passes only while it holds it
(`Reaper(sessions, broker, worker_timeout).start(Tenure(holder, interval))`, on its
entry's broker): one pass per interval for the whole fleet, however many workers it has; when
the holder dies, another process takes the lease over once it has expired. Every change
is a conditional UPDATE, so two reapers at once (a holder stalled past its lease, or
`run_once` called directly) still bring each chunk back once
(docs/adr/057-fleet-work-once.md)."""

from __future__ import annotations

import logging
import random
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.expiry import expire, overdue_ids
from dinfer_batch.jobs.running.chunk_state import settle, without_live_claim
from dinfer_batch.jobs.running.dispatch import top_up
from dinfer_batch.statuses import ChunkStatus, JobStatus
from dinfer_batch.storage import leases
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import Chunk, Job, Worker

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

log = logging.getLogger(__name__)

EMBEDDED_QUEUE = "embedded"  # `dinfer-batch run` jobs: no worker, no message, never reaped
KEEP_WORKERS_S = 24 * 3600  # rows of dead or stopped workers are kept this long
# the reaper's lease lasts this many passes: a holder that died is replaced after at most
# this many intervals (plus the next heartbeat of another worker)
LEASE_PASSES = 3
PRUNE_EVERY = 60  # passes between two prunes of old worker rows (10 min by default)


def reap_interval(heartbeat_seconds: float) -> float:
    """Seconds between two reaper passes: two heartbeat intervals (10 s by default)."""
    return 2 * heartbeat_seconds


@dataclass
class Reaped:
    dead: int = 0  # chunks of dead workers queued again
    published: int = 0  # permits the busy queues lacked, published
    pruned: int = 0  # worker rows dropped after KEEP_WORKERS_S
    expired: int = 0  # jobs past their completion window, expired (reads never write it)


@dataclass
class _Found:
    """What a pass found to do, in one read: running chunks of dead workers (job id,
    chunk id, worker, job status), queues with jobs in progress, jobs past their window."""

    dead: list[Any]
    queues: list[str]
    overdue: list[str]


class Reaper:
    """`run_once()` does one pass; `start()` runs passes on a daemon thread while this
    process holds the reaper's lease."""

    def __init__(self, sessions: sessionmaker[Session], broker: Broker,
                 worker_timeout: float) -> None:
        """`broker`: where the permits go; `worker_timeout`: DINFER_BATCH_WORKER_TIMEOUT,
        after which a silent worker is dead."""
        self.sessions = sessions
        self.broker = broker
        self.worker_timeout = worker_timeout
        self.passes = 0

    def run_once(self) -> Reaped:
        """One pass: one read transaction finds what to do (nothing, mostly: an idle
        fleet's pass is that read), then each part acts; each goes on when another fails
        (the database or Redis away): the failure is logged and the next pass tries
        again. Old worker rows are pruned every PRUNE_EVERY passes."""
        reaped = Reaped()
        try:
            found = self._look()
        except Exception as exc:
            log.warning("reaper: cannot read: %s: %s", type(exc).__name__, exc)
            return reaped
        prune = self.passes % PRUNE_EVERY == 0
        self.passes += 1
        for part, step in (("dead", partial(self.requeue_dead_workers_chunks, found.dead)),
                           ("published", partial(self.top_up_queues, found.queues)),
                           ("pruned", self.prune_workers if prune else int),
                           ("expired", partial(self.expire_jobs, found.overdue))):
            try:
                setattr(reaped, part, step())
            except Exception as exc:
                log.warning("reaper: %s failed: %s: %s", part, type(exc).__name__, exc)
        return reaped

    def _look(self) -> _Found:
        now = time.time()
        with self.sessions() as session:
            dead = session.execute(
                select(Chunk.job_id, Chunk.chunk_id, Chunk.worker, Job.status)
                .join(Job, Job.id == Chunk.job_id)
                .where(Chunk.status == ChunkStatus.RUNNING, Job.queue != EMBEDDED_QUEUE,
                       Job.status.in_((JobStatus.IN_PROGRESS, JobStatus.CANCELLING)),
                       Chunk.started_at < now - self.worker_timeout,
                       without_live_claim(self.worker_timeout, now))).all()
            queues = list(session.scalars(select(Job.queue).distinct().where(
                Job.status == JobStatus.IN_PROGRESS, Job.queue != EMBEDDED_QUEUE)))
            return _Found(list(dead), queues, overdue_ids(session))

    def requeue_dead_workers_chunks(self, rows: list[Any]) -> int:
        """Running chunks whose worker's heartbeat is older than the worker timeout (and
        claimed longer ago than that) go back to the queue; a cancelling job's are closed.
        Permits for them come with the pass's top-up."""
        requeued = 0
        for row in rows:
            cancelling = row.status == JobStatus.CANCELLING
            if not self._take_back(row.job_id, row.chunk_id, row.worker,
                                   ChunkStatus.CANCELLED if cancelling else ChunkStatus.QUEUED):
                continue  # another reaper, or a worker's claim, got there first
            if cancelling:
                settle(self.sessions, row.job_id)
                continue
            log.warning("reaper: worker %s is dead; chunk %s/%s queued again", row.worker,
                        row.job_id, row.chunk_id)
            requeued += 1
        return requeued

    def expire_jobs(self, job_ids: list[str]) -> int:
        """Expire these jobs past their completion window (jobs/expiry.py)."""
        return sum(expire(self.sessions, job_id) for job_id in job_ids)

    def _take_back(self, job_id: str, chunk_id: int, worker: str | None,
                   status: ChunkStatus) -> bool:
        with self.sessions.begin() as session:
            return bool(move_rows(session, status, Chunk.job_id == job_id,
                                  Chunk.chunk_id == chunk_id, Chunk.status == ChunkStatus.RUNNING,
                                  Chunk.worker == worker, worker=None))

    def top_up_queues(self, queues: list[str]) -> int:
        """Top up the permits of every queue with jobs in progress: one `LLEN` per queue
        when nothing is missing."""
        published = sum(top_up(self.sessions, self.broker, queue, self.worker_timeout)
                        for queue in queues)
        if published:
            log.info("reaper: published %d permit(s) the queues lacked", published)
        return published

    def prune_workers(self) -> int:
        with self.sessions.begin() as session:
            return changed(session, delete(Worker).where(
                Worker.heartbeat_at < time.time() - KEEP_WORKERS_S))

    def start(self, tenure: Tenure, stop: threading.Event | None = None) -> threading.Thread:
        """Make a pass every `tenure.interval` seconds on a daemon thread until `stop` is
        set, while this process holds the reaper's lease (renewed at each pass); asked
        for by the worker's heartbeat or, without one, here at each interval. The first
        comes after a random part of the interval, so that a fleet's tries spread out. A clean
        stop lets the lease go."""
        stop = stop or threading.Event()

        def loop() -> None:
            wait = random.uniform(0, tenure.interval)
            while not stop.wait(wait):
                wait = tenure.interval
                if not (tenure.held.is_set() or tenure.asks_here):
                    continue  # the heartbeat asks
                if self._lease(tenure):
                    self.run_once()
            with suppress(Exception):
                leases.give_up(self.sessions, leases.REAPER, tenure.holder)

        thread = threading.Thread(target=loop, name="dinfer-reaper", daemon=True)
        thread.start()
        return thread

    def _lease(self, tenure: Tenure) -> bool:
        """Whether this process holds (took or renewed) the lease; not while the database
        is away."""
        try:
            held = leases.take(self.sessions, leases.REAPER, tenure.holder, tenure.seconds)
        except Exception as exc:
            log.warning("reaper: cannot ask for the lease: %s: %s", type(exc).__name__, exc)
            held = False
        (tenure.held.set if held else tenure.held.clear)()
        return held


@dataclass
class Tenure:
    """One process's part in the reaper's lease: its name as holder, the passes'
    interval, whether it holds the lease now, and whether its reaper thread asks for it
    (`asks_here`: beat) or its heartbeat does (`ask_in`, in the heartbeat's transaction:
    a worker that does not hold it spends no transaction on asking)."""

    holder: str
    interval: float
    asks_here: bool = False
    held: threading.Event = field(default_factory=threading.Event)

    @property
    def seconds(self) -> float:
        return LEASE_PASSES * self.interval

    def ask_in(self, session: Session) -> None:
        """In the caller's transaction: take the lease if it is free (expired)."""
        if not self.held.is_set() and leases.take_in(session, leases.REAPER, self.holder,
                                                     self.seconds):
            self.held.set()
