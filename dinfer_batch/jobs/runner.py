"""Run one chunk: its pending items, grouped by generation parameters, go through the
engine in large batches; results are written as they land. Both the Celery task and the
embedded `run` command call this. Database calls wait out an outage (storage/retry.py);
one that outlasts the retries gives the permit back to the queue.

A chunk's engine work is bounded: each engine batch's constraints are compiled ahead of
its call, once per worker, and a request whose constraint cannot compile fails without
an engine call (never a retry in halves); past the chunk's deadline its remaining
requests fail."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import settings
from dinfer_batch.formats.output import Outcome, item_outcome
from dinfer_batch.formats.params import PER_REQUEST, engine_fields, sample_seeds
from dinfer_batch.formats.requests import render_prompt
from dinfer_batch.jobs import chunk_state, dispatch
from dinfer_batch.jobs.cache_scopes import account_of, line_scope
from dinfer_batch.jobs.chunk_bounds import (
    DEADLINE_CODE,
    Bounds,
    PastDeadline,
    constraint_errors,
)
from dinfer_batch.jobs.chunk_state import MAX_ATTEMPTS, ChunkMetrics
from dinfer_batch.jobs.lifecycle import get_job_to_change
from dinfer_batch.jobs.suspects import count_attempts, suspects
from dinfer_batch.model_info import model_path, public_name
from dinfer_batch.redact import for_clients, mask
from dinfer_batch.storage.retry import UNREACHABLE, DatabaseDown, patiently
from dinfer_batch.storage.tables import Item, Job
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintFailures
from dinfer_engine.generation_config import GenerationConfig
from dinfer_engine.result import GenerationResult
from dinfer_workers.engine_cache import (
    CacheScope,
    Prompt,
    RankFailure,
    WorkerEngine,
    generation_config,
    get_engine,
)
from dinfer_workers.tasks import GiveBack

log = logging.getLogger(__name__)

FLUSH_ITEMS = 32
# a slow model finishes an item every second or so: a shorter interval would make one
# write (on the job's one counter row) per item (docs/adr/005-scale.md)
FLUSH_SECONDS = 5.0


class _Stopping(Exception):
    """The worker is stopping warm: leave the engine call at the next finished request."""


@dataclass
class ChunkRunner:
    """Runs chunks; returns how each ended: `done`, `cancelled`, `released` (the worker is
    stopping: finished results are written and the chunk is queued again for another
    worker), or None when there was nothing to run. Setting `stopping` releases the chunk
    at its next finished request. A worker claims the next chunk of a queue and runs it
    (`claim_next_chunk`, `run_claimed`); the embedded `run` names its chunks (`__call__`)."""

    sessions: sessionmaker[Session]
    device: str
    worker: str
    batch_items: int
    on_written: Callable[[int], None] | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    # guards each engine call of a chunk (the worker's hang watchdog)
    watch: Callable[[Job, int], AbstractContextManager[None]] | None = None
    # a claimed chunk left running when the database stayed down (released at next claim)
    abandoned: tuple[str, int] | None = None
    deadline_seconds: float | None = field(default_factory=lambda: settings().chunk_deadline)
    # prompt tokens the engine's prefix cache gave back, in every chunk this runner ran
    prefix_tokens_reused: int = 0

    def __call__(self, job_id: str, chunk_id: int) -> str | None:
        """Run this chunk (the embedded `run`)."""
        with _given_back(f"chunk {chunk_id} of {job_id}"):
            items = patiently(chunk_state.claim, self.sessions, job_id, chunk_id,
                              self.worker, self.device)
            if items is None:
                patiently(chunk_state.settle, self.sessions, job_id)
                return None
            return self._run(job_id, chunk_id, items)

    def claim_next_chunk(self, queue: str) -> tuple[str, int, list[Item]] | None:
        """Claim the queue's next chunk (jobs/dispatch.py): (job id, chunk id, items).
        A chunk this worker gave up while the database was down goes back first."""
        with _given_back(f"a permit of queue {queue}"):
            if self.abandoned is not None:
                patiently(chunk_state.release, self.sessions, *self.abandoned, self.worker)
                self.abandoned = None
            return patiently(dispatch.claim_next_chunk, self.sessions, queue, self.worker,
                             self.device)

    def run_claimed(self, job_id: str, chunk_id: int, items: list[Item]) -> str:
        try:
            with _given_back(f"chunk {chunk_id} of {job_id}"):
                return self._run(job_id, chunk_id, items)
        except GiveBack:
            self.abandoned = (job_id, chunk_id)
            raise

    def _run(self, job_id: str, chunk_id: int, items: list[Item]) -> str:
        job = patiently(get_job_to_change, self.sessions, job_id)
        account = patiently(account_of, self.sessions, job.owner)
        writer = _Writer(self.sessions, job_id, self.on_written)
        metrics = ChunkMetrics()
        items = [i for i in items if i.duplicate_of is None]  # duplicates get copies
        writer.fail([i for i in items if i.attempts > MAX_ATTEMPTS], "worker_lost",
                    f"a worker died {MAX_ATTEMPTS} times while running this request")
        runnable = [i for i in items if i.attempts <= MAX_ATTEMPTS]
        status = "done"
        bounds = Bounds.starting(self.stopping, self.deadline_seconds)
        for index, (shared, batch, alone) in enumerate(self._plan(job, runnable)):
            if self.stopping.is_set():
                status = "released"
                break
            if index and patiently(get_job_to_change, self.sessions,
                                   job_id).status != "in_progress":
                status = "cancelled"  # or expired; the claim checked it for the first batch
                break
            try:
                engine = get_engine(str(model_path(job.model)), self.device)
                if self.watch is not None:
                    engine = _Watched(engine, partial(self.watch, job, chunk_id))
            except RankFailure:  # not the chunk's fault: the replica restarts
                raise
            except Exception as exc:  # the chunk must still end; `retry` re-queues its items
                reason = f"{type(exc).__name__}: {exc}"  # clients read it: no server path
                writer.fail(runnable, "engine_error", for_clients(mask(
                    f"cannot load the model {public_name(job.model)}: {reason}"),
                    settings().server_dirs()))
                break
            if alone:  # a suspect: only the one in the engine carries the attempt
                patiently(count_attempts, self.sessions, job_id, [batch[0].line], 1)
            try:
                _generate(engine, batch, job, account, shared, writer, metrics, bounds)
            except _Stopping:
                status = "released"
                break
            if alone:
                writer.flush()
        writer.flush()
        self.prefix_tokens_reused += metrics.prefix_tokens_reused
        if status == "released":
            patiently(chunk_state.release, self.sessions, job_id, chunk_id, self.worker)
        else:
            patiently(chunk_state.finish, self.sessions, job_id, chunk_id, status, metrics)
        return status


    def _plan(self, job: Job, items: list[Item]
              ) -> Iterator[tuple[dict[str, Any], list[Item], bool]]:
        """(shared parameters, engine batch, whether it is a suspect run alone): the items
        in large batches, then the suspects one at a time (jobs/suspects.py)."""
        flags = suspects([item.attempts for item in items])
        trusted = [item for item, suspect in zip(items, flags, strict=True) if not suspect]
        alone = [item for item, suspect in zip(items, flags, strict=True) if suspect]
        for shared, batch in _batches(job.params, trusted, self.batch_items):
            yield shared, batch, False
        if alone:
            patiently(count_attempts, self.sessions, job.id, [i.line for i in alone], -1)
        for shared, batch in _batches(job.params, alone, 1):
            yield shared, batch, True


@contextmanager
def _given_back(what: str) -> Iterator[None]:
    """A database that stayed down: the permit must not be consumed, back to the queue."""
    try:
        yield
    except DatabaseDown as exc:
        raise GiveBack(f"{what} given back: {exc}") from exc


@dataclass
class _Watched:
    """The engine with each generate call under a guard."""

    engine: WorkerEngine
    guard: Callable[[], AbstractContextManager[None]]

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(self, prompts: Sequence[Prompt], config: GenerationConfig | None = None,
                 on_result: Callable[[int, GenerationResult], None] | None = None,
                 seeds: Sequence[int | None] | None = None,
                 constraints: Sequence[ConstraintSpec | None] | None = None,
                 scopes: Sequence[CacheScope] | None = None
                 ) -> list[GenerationResult]:
        with self.guard():
            return self.engine.generate(prompts, config, on_result, seeds, constraints,
                                        scopes=scopes)

    def constraint_error(self, spec: ConstraintSpec) -> str | None:
        return self.engine.constraint_error(spec)


def _params(defaults: dict[str, Any], item: Item) -> dict[str, Any]:
    """The item's effective parameters: the job's defaults under the line's overrides."""
    return defaults | (item.request or {})["params"]


def _batches(defaults: dict[str, Any], items: list[Item],
             size: int) -> list[tuple[dict[str, Any], list[Item]]]:
    """Engine batches of at most `size` items that share their parameters (all but the
    per-item ones), in input order within each group."""
    groups: dict[str, tuple[dict[str, Any], list[Item]]] = {}
    for item in items:
        shared = {k: v for k, v in _params(defaults, item).items() if k not in PER_REQUEST}
        groups.setdefault(json.dumps(shared, sort_keys=True), (shared, []))[1].append(item)
    return [(shared, group[start:start + size]) for shared, group in groups.values()
            for start in range(0, len(group), size)]


def _generate(engine: WorkerEngine, batch: list[Item], job: Job, account: str,
              shared: dict[str, Any], writer: _Writer, metrics: ChunkMetrics,
              bounds: Bounds) -> None:
    """One engine call for the batch: each item's `n` samples are `n` rows with seeds
    seed, seed+1, ... (the engine draws each row's noise from its own seed alone). Leaves
    the call at the next result once the worker is stopping or the deadline has passed.
    The batch's constraints are compiled first, one at a time: items whose constraint
    cannot compile fail without an engine call, and past the deadline all do. Each item's
    prompt reuses cached prompt blocks of its scope only (`account`: its job's owner's,
    jobs/cache_scopes.py)."""
    own = [_params(job.params, item) for item in batch]
    specs = [None if "structured" not in params else
             replace(ConstraintSpec.from_dict(params["structured"]), scope=account)
             for params in own]
    known = constraint_errors(engine, specs, bounds)
    if known is None:
        writer.fail(batch, DEADLINE_CODE, bounds.deadline_message())
        return
    if known:
        _fail_constraints(writer, batch, known)
        rest = [item for index, item in enumerate(batch) if index not in known]
        if rest:
            _generate(engine, rest, job, account, shared, writer, metrics, bounds)
        return
    seeds = [sample_seeds(params, job.seed_base, item.line)
             for params, item in zip(own, batch, strict=True)]
    rows = [(index, sample) for index, item_seeds in enumerate(seeds)
            for sample in range(len(item_seeds))]
    landed: dict[int, dict[int, GenerationResult]] = {}
    finished: set[int] = set()

    def on_result(row: int, result: GenerationResult) -> None:
        index, sample = rows[row]
        samples = landed.setdefault(index, {})
        samples[sample] = result
        metrics.prompt_tokens += result.prompt_tokens
        metrics.completion_tokens += result.completion_tokens
        metrics.forwards += result.nfe
        metrics.prefix_tokens_reused += result.prefix_tokens_reused or 0
        if len(samples) == len(seeds[index]):
            finished.add(index)
            writer.add(item_outcome(batch[index].line,
                                    [samples[i] for i in range(len(samples))],
                                    own[index].get("stop", []), engine.tokenizer))
        if bounds.stopping.is_set():
            raise _Stopping
        if bounds.past_deadline():
            raise PastDeadline

    started = time.perf_counter()
    failure: Exception | None = None
    try:
        prompts = [render_prompt(item.request or {}, engine.tokenizer, params)
                   for item, params in zip(batch, own, strict=True)]
        engine.generate([prompts[index] for index, _ in rows],
                        generation_config(engine_fields(shared)), on_result=on_result,
                        seeds=[seeds[index][sample] for index, sample in rows],
                        constraints=[specs[index] for index, _ in rows],
                        scopes=[line_scope(account, own[index]) for index, _ in rows])
    except _Stopping:
        writer.flush()
        raise
    except (SQLAlchemyError, DatabaseDown, RankFailure):  # not the requests' fault
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the engine raised, the chunk goes on
        failure = exc
    metrics.batch_sizes.append(len(batch))
    metrics.seconds += time.perf_counter() - started
    writer.flush()
    if failure is None:
        return
    rest = [item for index, item in enumerate(batch) if index not in finished]
    if isinstance(failure, PastDeadline):
        writer.fail(rest, DEADLINE_CODE, bounds.deadline_message())
        return
    bad = {} if not isinstance(failure, ConstraintFailures) else {
        rows[row][0]: reason for row, reason in failure.errors.items() if row < len(rows)}
    if bad:  # the call failed before any forward: its other items run again, together
        _fail_constraints(writer, batch, bad)
        again = [item for index, item in enumerate(batch)
                 if index not in bad and index not in finished]
        if again:
            _generate(engine, again, job, account, shared, writer, metrics, bounds)
        return
    _isolate(failure, engine, rest, job, account, shared, writer, metrics, bounds)


def _fail_constraints(writer: _Writer, batch: list[Item], errors: dict[int, str]) -> None:
    """Fail the items at these indices of the batch, each with why its constraint cannot
    compile."""
    writer.fail_each([(batch[index], "invalid_request", f"structured output: {reason}")
                      for index, reason in errors.items()])


def _isolate(failure: Exception, engine: WorkerEngine, rest: list[Item], job: Job,
             account: str, shared: dict[str, Any], writer: _Writer, metrics: ChunkMetrics,
             bounds: Bounds) -> None:
    """An engine call failed: one bad request fails the whole call, so run the unfinished
    items again in halves until the culprit is alone; it alone fails (`invalid_request`
    for values the engine refused, else `engine_error`)."""
    if len(rest) > 1:
        log.warning("engine call on %d items failed (%s: %s); retrying them in halves",
                    len(rest), type(failure).__name__, failure)
        half = len(rest) // 2
        for part in (rest[:half], rest[half:]):
            _generate(engine, part, job, account, shared, writer, metrics, bounds)
    elif isinstance(failure, ValueError):
        writer.fail(rest, "invalid_request", str(failure))
    else:
        writer.fail(rest, "engine_error", f"{type(failure).__name__}: {failure}")


@dataclass
class _Writer:
    """Buffers outcomes and writes them in small transactions (every FLUSH_ITEMS items or
    FLUSH_SECONDS seconds), so results land while the engine is still running."""

    sessions: sessionmaker[Session]
    job_id: str
    on_written: Callable[[int], None] | None
    buffer: list[Outcome] = field(default_factory=list)
    last_flush: float = field(default_factory=time.monotonic)
    quiet_until: float = 0.0  # after a failed write, when to try again

    def add(self, outcome: Outcome) -> None:
        """Called while the engine runs: a write that cannot reach the database keeps the
        outcomes buffered (and is tried again FLUSH_SECONDS later) instead of holding up
        the engine call."""
        self.buffer.append(outcome)
        now = time.monotonic()
        due = len(self.buffer) >= FLUSH_ITEMS or now - self.last_flush > FLUSH_SECONDS
        if due and now >= self.quiet_until:
            try:
                self._write(chunk_state.record)
            except UNREACHABLE:
                self.quiet_until = now + FLUSH_SECONDS

    def fail(self, items: list[Item], code: str, message: str) -> None:
        """Fail the items not already finished (the write skips finished ones)."""
        self.fail_each([(item, code, message) for item in items])

    def fail_each(self, failures: list[tuple[Item, str, str]]) -> None:
        """Fail each item with its own code and message (unless already finished)."""
        for item, code, message in failures:
            self.buffer.append(Outcome(line=item.line, error_code=code, error_message=message))
        self.flush()

    def flush(self) -> None:
        """Write what is buffered, waiting for the database if it is down."""
        self._write(lambda sessions, job_id, outcomes: patiently(chunk_state.record, sessions,
                                                                 job_id, outcomes))

    def _write(self, record: Callable[[sessionmaker[Session], str, list[Outcome]], int]) -> None:
        if self.buffer:
            written = record(self.sessions, self.job_id, self.buffer)
            if self.on_written:
                self.on_written(written)
        self.buffer, self.last_flush = [], time.monotonic()
