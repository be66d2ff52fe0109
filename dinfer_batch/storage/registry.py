"""The workers table: each worker process registers itself, heartbeats every few seconds
with what it is doing, and marks itself stopped on a clean exit. A worker is live while its
heartbeat is younger than `DINFER_BATCH_WORKER_TIMEOUT` and it has not stopped."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, literal, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.storage.tables import Worker

LISTED_DEAD_S = 3600  # `dinfer-batch workers` shows dead workers this long


@dataclass
class WorkerState:
    """What a worker is doing, as its heartbeat reports it (set by the chunk handler)."""

    job_id: str | None = None
    chunk_id: int | None = None
    items_done: int = 0
    tokens: int = 0
    busy_s: float = 0.0
    prefix_tokens_reused: int = 0  # prompt tokens the engine's prefix cache gave back

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.busy_s if self.busy_s else 0.0

    def shown(self) -> tuple[object, ...]:
        """What its row shows of it (a heartbeat that would change none of it may wait)."""
        return (self.job_id, self.chunk_id, self.items_done, round(self.tokens_per_s, 2),
                self.prefix_tokens_reused)


def register(sessions: sessionmaker[Session], worker_id: str, name: str, model: str,
             device: str, queues: list[str]) -> None:
    now = time.time()
    with sessions.begin() as session:
        session.add(Worker(id=worker_id, name=name, host=socket.gethostname(),
                           pid=os.getpid(), model=model, device=device,
                           queues=",".join(queues), items_done=0, tokens_per_s=0.0,
                           prefix_tokens_reused=0,
                           started_at=now, heartbeat_at=now))


def write_heartbeat(sessions: sessionmaker[Session], worker_id: str, state: WorkerState,
                    stopped: bool = False,
                    also: Callable[[Session], None] | None = None) -> None:
    """Write the worker's state; `stopped` marks a clean exit (its last heartbeat);
    `also` runs in the same transaction (the reaper's lease asked for: fleet/reaper.py)."""
    now = time.time()
    with sessions.begin() as session:
        if also is not None:
            also(session)
        session.execute(update(Worker).where(Worker.id == worker_id).values(
            heartbeat_at=now, job_id=state.job_id, chunk_id=state.chunk_id,
            items_done=state.items_done, tokens_per_s=round(state.tokens_per_s, 2),
            prefix_tokens_reused=state.prefix_tokens_reused,
            stopped_at=now if stopped else None))


def state_of(worker: Worker, worker_timeout: float, now: float | None = None) -> str:
    """`live`, `stopped` (exited cleanly) or `dead` (heartbeat older than
    `worker_timeout`)."""
    if worker.stopped_at is not None:
        return "stopped"
    since = (now or time.time()) - worker_timeout
    return "live" if worker.heartbeat_at >= since else "dead"


def recent_workers(sessions: sessionmaker[Session]) -> list[Worker]:
    """Live workers and those that died or stopped within the last hour, by name."""
    with sessions() as session:
        return list(session.scalars(
            select(Worker).where(Worker.heartbeat_at >= time.time() - LISTED_DEAD_S)
            .order_by(Worker.host, Worker.name, Worker.started_at)))


def _live(worker_timeout: float) -> tuple:
    since = time.time() - worker_timeout
    return (Worker.heartbeat_at >= since, Worker.stopped_at.is_(None))


def live_count(sessions: sessionmaker[Session], worker_timeout: float) -> int:
    """How many workers are live (what `dinfer-batch workers` shows as live)."""
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Worker)
                              .where(*_live(worker_timeout))) or 0


def live_on_job(sessions: sessionmaker[Session], job_id: str, worker_timeout: float) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Worker).where(
            Worker.job_id == job_id, *_live(worker_timeout))) or 0


def live_workers(sessions: sessionmaker[Session], worker_timeout: float) -> list[Worker]:
    with sessions() as session:
        return list(session.scalars(select(Worker).where(*_live(worker_timeout))))


def live_count_on_queue(session: Session, queue: str, worker_timeout: float) -> int:
    """In the caller's session: how many live workers take `queue` (one of their
    comma-separated queues), counted by the database: a top-up reads one number, not
    every worker's row. (SQLite's LIKE ignores ASCII case: a queue spelt in other cases
    counts there too, where no fleet runs.)"""
    pattern = "%," + queue.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ",%"
    listed = literal(",") + Worker.queues + literal(",")
    return session.scalar(select(func.count()).select_from(Worker).where(
        listed.like(pattern, escape="\\"), *_live(worker_timeout))) or 0


def live_on_queue(sessions: sessionmaker[Session], queue: str,
                  worker_timeout: float) -> list[Worker]:
    return [w for w in live_workers(sessions, worker_timeout) if queue in w.queues.split(",")]


def live_rates(sessions: sessionmaker[Session], job_ids: list[str],
               worker_timeout: float) -> dict[str, float]:
    """The tokens per second of the live workers on each of these jobs (absent: none)."""
    if not job_ids:
        return {}
    with sessions() as session:
        rows = session.execute(select(Worker.job_id, func.sum(Worker.tokens_per_s)).where(
            Worker.job_id.in_(job_ids), *_live(worker_timeout)).group_by(Worker.job_id))
        return {job_id: float(rate or 0) for job_id, rate in rows if job_id is not None}
