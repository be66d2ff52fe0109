"""The transactions a chunk goes through while a worker runs it. Each is short and
conditional, so a re-delivered chunk, or two workers on one chunk, never count an item
twice: an item's result is written only while the item is still pending."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, Table, and_, bindparam, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.formats.results.output import Outcome, cached_tokens
from dinfer_batch.jobs.reading.result_sizes import measure_ended
from dinfer_batch.jobs.transitions import move
from dinfer_batch.statuses import OPEN_CHUNK, ChunkStatus, ItemStatus, JobStatus
from dinfer_batch.storage.moves import move_each, move_rows
from dinfer_batch.storage.tables import Chunk, Item, Job, Worker
from dinfer_engine.result import GenerationResult

# an item's attempts: the runs that held it and neither finished it nor gave it back; a
# request in hand when workers died twice fails (jobs/running/suspects.py)
MAX_ATTEMPTS = 2


@dataclass
class ChunkMetrics:
    batch_sizes: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    forwards: int = 0
    seconds: float = 0.0
    prefix_tokens_reused: int = 0  # prompt tokens the engine's prefix cache gave back
    items: int = 0  # the pending items the claim gave (the chunk's still to run)

    def count(self, result: GenerationResult) -> None:
        """Add what one engine row used."""
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.forwards += result.nfe
        self.prefix_tokens_reused += result.prefix_tokens_reused or 0


def live_worker_ids(worker_timeout: float, now: float | None = None) -> Select:
    """The ids of workers whose heartbeat is younger than `worker_timeout` and that have
    not stopped."""
    since = (now or time.time()) - worker_timeout
    return select(Worker.id).where(Worker.heartbeat_at >= since, Worker.stopped_at.is_(None))


def without_live_claim(worker_timeout: float, now: float | None = None
                       ) -> ColumnElement[bool]:
    """A chunk no live worker holds: queued, or running for a worker that is gone."""
    return or_(Chunk.status == ChunkStatus.QUEUED,
               and_(Chunk.status == ChunkStatus.RUNNING,
                    or_(Chunk.worker.is_(None),
                        Chunk.worker.not_in(live_worker_ids(worker_timeout, now)))))


def claim(sessions: sessionmaker[Session], job_id: str, chunk_id: int, worker: str,
          device: str, worker_timeout: float) -> list[Item] | None:
    """Mark the chunk running and return its pending items in input order. None when there
    is nothing to run: the chunk is closed, a live worker holds it (a duplicate message),
    or its job is not in progress (a chunk of a cancelling job is closed here as
    cancelled). A running chunk whose worker stopped heartbeating is taken over, so a
    message re-delivered after the visibility timeout still resumes it."""
    with sessions.begin() as session:
        status = session.scalar(select(Job.status).where(Job.id == job_id))
        if status == JobStatus.CANCELLING:
            move_rows(session, ChunkStatus.CANCELLED, Chunk.job_id == job_id,
                      Chunk.chunk_id == chunk_id)
        if status != JobStatus.IN_PROGRESS:
            return None
        return take(session, job_id, chunk_id, worker, device, worker_timeout)


def take(session: Session, job_id: str, chunk_id: int, worker: str,
         device: str, worker_timeout: float) -> list[Item] | None:
    """In the caller's transaction: mark the chunk running for `worker` unless a live
    worker (one heartbeating within `worker_timeout`) holds it, count an attempt on it and
    on each of its pending items that no run died with (the others, suspects, count one
    each when it is the one in the engine: jobs/running/suspects.py), and return the
    pending items in input order as the claim found them (`attempts`: the runs that died
    with each in hand); None when it could not be taken."""
    if not move_rows(session, ChunkStatus.RUNNING, Chunk.job_id == job_id,
                     Chunk.chunk_id == chunk_id, without_live_claim(worker_timeout),
                     attempts=Chunk.attempts + 1, worker=worker, device=device,
                     started_at=time.time()):
        return None
    pending = (Item.job_id == job_id, Item.chunk_id == chunk_id, Item.status == ItemStatus.PENDING)
    items = list(session.scalars(select(Item).where(*pending).order_by(Item.line)))
    session.execute(update(Item).where(*pending, Item.attempts == 0).values(attempts=1)
                    .execution_options(synchronize_session=False))
    return items


def release(sessions: sessionmaker[Session], job_id: str, chunk_id: int, worker: str,
            give_back: Sequence[int] = ()) -> bool:
    """Give a running chunk back to the queue: it is queued again, and the pending items
    of `give_back` (the lines whose attempt this run counted, when it stops warm: no
    worker died on them) get that attempt back; a worker giving up a hung engine call
    gives none back. False when this worker no longer held the chunk."""
    with sessions.begin() as session:
        released = move_rows(session, ChunkStatus.QUEUED, Chunk.job_id == job_id,
                             Chunk.chunk_id == chunk_id, Chunk.worker == worker,
                             Chunk.status == ChunkStatus.RUNNING, worker=None)
        if released and give_back:
            session.execute(update(Item).where(
                Item.job_id == job_id, Item.line.in_(list(give_back)),
                Item.status == ItemStatus.PENDING, Item.attempts > 0
            ).values(attempts=Item.attempts - 1))
    return bool(released)


ITEMS, JOBS = cast(Table, Item.__table__), cast(Table, Job.__table__)
# A result write's statements, built once: a worker runs them every FLUSH_ITEMS results
# (jobs/running/result_writer.py), and building them cost more CPU than running them.
_PENDING = (select(ITEMS.c.line, ITEMS.c.tokens)
            .where(ITEMS.c.job_id == bindparam("job"),
                   ITEMS.c.line.in_(bindparam("lines", expanding=True)),
                   ITEMS.c.status == ItemStatus.PENDING)
            .with_for_update())
_PENDING_DUPLICATES = (select(ITEMS.c.line, ITEMS.c.duplicate_of, ITEMS.c.tokens)
                       .where(ITEMS.c.job_id == bindparam("job"),
                              ITEMS.c.duplicate_of.is_not(None),  # its index
                              ITEMS.c.duplicate_of.in_(bindparam("originals", expanding=True)),
                              ITEMS.c.status == ItemStatus.PENDING)
                       .with_for_update())
_COUNT = update(JOBS).where(JOBS.c.id == bindparam("job")).values(
    completed_count=JOBS.c.completed_count + bindparam("completed"),
    failed_count=JOBS.c.failed_count + bindparam("failed"),
    enqueued_tokens=JOBS.c.enqueued_tokens - bindparam("tokens"),
    prompt_tokens=JOBS.c.prompt_tokens + bindparam("prompt"),
    cached_tokens=JOBS.c.cached_tokens + bindparam("cached"),
    completion_tokens=JOBS.c.completion_tokens + bindparam("completion"))


def record(sessions: sessionmaker[Session], job_id: str, outcomes: list[Outcome],
           duplicates: bool = True) -> int:
    """Write the outcomes of items still pending (the first outcome of each), copy them to
    the pending duplicates of those items (`duplicates`: whether the job has any, its
    `deduplicated_count`, fixed at ingest: none, no query for them), and move the job's
    counters; returns how many items were written. Items already finished by an earlier
    delivery are skipped; their pending rows are locked first, so on PostgreSQL two
    workers on one chunk cannot both write an item. The job's usage counts what was
    computed, not the copies; its enqueued tokens (quota.py) fall by the tokens of every
    item written."""
    with sessions.begin() as session:
        connection = session.connection()
        pending = dict(connection.execute(
            _PENDING, {"job": job_id, "lines": [o.line for o in outcomes]}).all())
        fresh: dict[int, Outcome] = {}
        for outcome in outcomes:
            if outcome.line in pending:
                fresh.setdefault(outcome.line, outcome)
        if not fresh:
            return 0
        copies: list[Outcome] = []
        for line, original, tokens in connection.execute(
                _PENDING_DUPLICATES, {"job": job_id, "originals": list(fresh)}
        ) if duplicates else ():
            copies.append(replace(fresh[original], line=line))
            pending[line] = tokens
        written = [*fresh.values(), *copies]
        for status, rows in _item_rows(job_id, written, time.time()).items():
            move_each(session, status, rows)
        failed = sum(1 for o in written if o.error_code)
        connection.execute(_COUNT, {
            "job": job_id, "completed": len(written) - failed, "failed": failed,
            "tokens": sum(pending[o.line] or 0 for o in written),
            "prompt": sum(o.prompt_tokens for o in fresh.values()),
            "cached": sum(cached_tokens(o.prompt_tokens, o.prefix_tokens_reused)
                          for o in fresh.values()),
            "completion": sum(o.completion_tokens for o in fresh.values())})
    return len(written)


def _item_rows(job_id: str, outcomes: list[Outcome],
               now: float) -> dict[ItemStatus, list[dict[str, Any]]]:
    """The items' values by the status each enters: failed with an error, else completed."""
    rows: dict[ItemStatus, list[dict[str, Any]]] = {ItemStatus.COMPLETED: [],
                                                    ItemStatus.FAILED: []}
    for outcome in outcomes:
        status = ItemStatus.FAILED if outcome.error_code else ItemStatus.COMPLETED
        rows[status].append(_item_values(job_id, outcome, now))
    return rows


def _item_values(job_id: str, outcome: Outcome, now: float) -> dict[str, Any]:
    return {"job_id": job_id, "line": outcome.line,
            "output_text": outcome.text, "finish_reason": outcome.finish_reason,
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens, "nfe": outcome.nfe,
            "latency_s": outcome.latency_s, "error_code": outcome.error_code,
            "error_message": outcome.error_message, "samples": outcome.samples,
            "logprobs": outcome.logprobs, "finished_at": now,
            "edited_tokens": outcome.edited_tokens, "post_steps": outcome.post_steps,
            "prefix_tokens_reused": outcome.prefix_tokens_reused}


def note_error(sessions: sessionmaker[Session], job_id: str, message: str) -> None:
    """Give the job this error unless it has one (a model that cannot be loaded: the
    job's error says why once, its requests point to it); it stays when the job fails."""
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job_id, Job.error.is_(None))
                        .values(error=message))


CHUNKS = cast(Table, Chunk.__table__)
_OPEN_CHUNKS = select(func.count()).select_from(CHUNKS).where(
    CHUNKS.c.job_id == bindparam("job"), CHUNKS.c.status.in_(OPEN_CHUNK))


def finish(sessions: sessionmaker[Session], job_id: str, chunk_id: int,
           status: ChunkStatus, metrics: ChunkMetrics) -> bool:
    """Close the running chunk (`done` or `cancelled`), then settle the job in a later
    transaction, so that of two chunks ending together at least the second sees none left
    open, with no lock on the job's row (every chunk's end would queue on it); True when
    it ended the job. Its result files are left to measure (`measure_ended`, the
    caller's: a worker does it off its engine's thread)."""
    with sessions.begin() as session:
        move_each(session, status, [{
            "job_id": job_id, "chunk_id": chunk_id, "batch_sizes": metrics.batch_sizes,
            "prompt_tokens": metrics.prompt_tokens,
            "completion_tokens": metrics.completion_tokens, "forwards": metrics.forwards,
            "seconds": metrics.seconds, "finished_at": time.time()}])
    with sessions.begin() as session:
        return _settle(session, job_id)


def settle(sessions: sessionmaker[Session], job_id: str) -> None:
    """Settle the job (`_settle`), then measure its result files if that ended it."""
    with sessions.begin() as session:
        if not _settle(session, job_id):
            return
    measure_ended(sessions, job_id)  # its result files' sizes, once (jobs/reading/result_sizes.py)


def _settle(session: Session, job_id: str) -> bool:
    """In the caller's transaction: end the job once no chunk is open: in_progress ->
    completed (or failed when no request succeeded, keeping an error already noted),
    cancelling -> cancelled; True when it ended it. Conditional, so it happens once
    (jobs/transitions.py records the end). Callers settle after the chunks they closed
    committed, so of two chunks closed together the later settle sees both closed."""
    if session.connection().scalar(_OPEN_CHUNKS, {"job": job_id}):
        return False
    now = time.time()
    ended = move(session, job_id, JobStatus.CANCELLED, now=now)
    if not ended and move(session, job_id, JobStatus.FINALIZING, now=now):
        if session.scalar(select(Job.completed_count).where(Job.id == job_id)):
            ended = move(session, job_id, JobStatus.COMPLETED, now=now)
        else:
            ended = move(session, job_id, JobStatus.FAILED, now=now,
                         error=func.coalesce(Job.error, "no request succeeded; see "
                                             "the errors in the results"))
    return ended
