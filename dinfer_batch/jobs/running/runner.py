"""Run one chunk: its pending items, grouped by generation parameters, go through the
engine in large batches (jobs/running/chunk_run.py); results are written as they land. Both the
Celery task and the embedded `run` command call this. Database calls wait out an outage
(storage/retry.py); one that outlasts the retries gives the permit back to the queue.
Items in hand when workers died are run one at a time, and fail once workers died twice
with them in hand (jobs/running/suspects.py); each attempt is counted once."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.formats.parameters.params import PER_REQUEST
from dinfer_batch.jobs.expiry import get_job_to_change
from dinfer_batch.jobs.reading.result_sizes import measure_ended
from dinfer_batch.jobs.running import chunk_state, dispatch
from dinfer_batch.jobs.running.cache_scopes import account_of
from dinfer_batch.jobs.running.chunk_bounds import Bounds
from dinfer_batch.jobs.running.chunk_run import ChunkRun, Line, Stopping
from dinfer_batch.jobs.running.chunk_state import ChunkMetrics
from dinfer_batch.jobs.running.result_writer import ResultWriter, writer_thread
from dinfer_batch.jobs.running.suspects import WORKER_LOST, count_attempt, lost, suspects
from dinfer_batch.model_info import model_path, public_name
from dinfer_batch.redact import for_clients, mask
from dinfer_batch.statuses import ChunkStatus, JobStatus
from dinfer_batch.storage.retry import DatabaseDown, patiently
from dinfer_batch.storage.tables import Item, Job
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.generation_config import GenerationConfig
from dinfer_engine.request import GenerationRequest
from dinfer_engine.result import GenerationResult
from dinfer_workers.engine_cache import (
    EngineFactory,
    Prompt,
    RankFailure,
    WorkerEngine,
)
from dinfer_workers.load_failure import explain
from dinfer_workers.tasks import GiveBack


class ChunkEnd(StrEnum):
    """How a chunk's run ended."""

    DONE = "done"  # every item written
    CANCELLED = "cancelled"  # its job stopped being in progress (cancelled, expired)
    RELEASED = "released"  # the worker is stopping: queued again for another worker


# a request not run because its model could not be loaded (the job's error says why)
MODEL_NOT_LOADED = "model_not_loaded"


log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
CLOSED_AS = {ChunkEnd.DONE: ChunkStatus.DONE, ChunkEnd.CANCELLED: ChunkStatus.CANCELLED}


@dataclass
class ChunkRunner:
    """Runs chunks, each to a ChunkEnd (None when there was nothing to run). Setting
    `stopping` releases the chunk at its next finished request. A worker claims the next
    chunk of a queue and runs it (`claim_next_chunk`, `run_claimed`); the embedded `run`
    names its chunks (`__call__`)."""

    sessions: sessionmaker[Session]
    device: str
    worker: str
    batch_items: int
    config: Settings  # the process's, read at its entry
    engines: EngineFactory  # the process's (engine_options.configure_engines), or a stand-in
    on_written: Callable[[int], None] | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    # guards each engine call of a chunk (the worker's hang watchdog)
    watch: Callable[[Job, int], AbstractContextManager[None]] | None = None
    # a claimed chunk left running when the database stayed down (released at next claim),
    # with the lines whose attempt its run counted (given back then)
    abandoned: tuple[str, int, list[int]] | None = None
    # prompt tokens the engine's prefix cache gave back, in every chunk this runner ran
    prefix_tokens_reused: int = 0
    # what the last chunk this runner ran counted (a worker's heartbeat figures)
    last: ChunkMetrics = field(default_factory=ChunkMetrics)
    # where its results are written, off the engine's thread (jobs/running/result_writer.py)
    writes: ThreadPoolExecutor = field(default_factory=writer_thread)

    def _patiently(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return patiently(self.config.db_retry_seconds, call, *args, **kwargs)

    def __call__(self, job_id: str, chunk_id: int) -> ChunkEnd | None:
        """Run this chunk (the embedded `run`)."""
        with _given_back(f"chunk {chunk_id} of {job_id}"):
            items = self._patiently(chunk_state.claim, self.sessions, job_id, chunk_id,
                                    self.worker, self.device, self.config.worker_timeout)
            if items is None:
                self._patiently(chunk_state.settle, self.sessions, job_id)
                return None
            return self._run(job_id, chunk_id, items, [])

    def claim_next_chunk(self, queue: str) -> tuple[str, int, list[Item]] | None:
        """Claim the queue's next chunk (jobs/running/dispatch.py): (job id, chunk id, items).
        A chunk this worker gave up while the database was down goes back first."""
        with _given_back(f"a permit of queue {queue}"):
            if self.abandoned is not None:
                job_id, chunk_id, counted = self.abandoned
                self._patiently(chunk_state.release, self.sessions, job_id, chunk_id,
                                self.worker, counted)
                self.abandoned = None
            return self._patiently(dispatch.claim_next_chunk, self.sessions, queue,
                                   self.worker, self.device, self.config.worker_timeout)

    def run_claimed(self, job_id: str, chunk_id: int, items: list[Item]) -> ChunkEnd:
        counted: list[int] = []
        try:
            with _given_back(f"chunk {chunk_id} of {job_id}"):
                return self._run(job_id, chunk_id, items, counted)
        except GiveBack:
            self.abandoned = (job_id, chunk_id, counted)
            raise

    def _run(self, job_id: str, chunk_id: int, items: list[Item],
             counted: list[int]) -> ChunkEnd:
        """Run the claimed items (as the claim found them); `counted` gets the lines
        whose attempt this run counted: the claim's, then each suspect's in the engine."""
        counted += [i.line for i, suspect in zip(items, suspects([i.attempts for i in items]),
                                                 strict=True) if not suspect]
        job = self._patiently(get_job_to_change, self.sessions, job_id)
        writer = ResultWriter(self.sessions, job_id, self.config.db_retry_seconds,
                              self.on_written, self.writes, job.deduplicated_count > 0)
        metrics = self.last = ChunkMetrics(items=len(items))
        items = [i for i in items if i.duplicate_of is None]  # duplicates get copies
        writer.fail([i for i in items if lost(i.attempts)], *WORKER_LOST)
        runnable = [i for i in items if not lost(i.attempts)]
        end = self._run_batches(job, chunk_id, runnable, writer, metrics, counted)
        writer.flush()
        self.prefix_tokens_reused += metrics.prefix_tokens_reused
        if end is ChunkEnd.RELEASED:
            self._patiently(chunk_state.release, self.sessions, job_id, chunk_id, self.worker,
                            counted)
        elif self._patiently(chunk_state.finish, self.sessions, job_id, chunk_id,
                             CLOSED_AS[end], metrics):
            self.writes.submit(_measure_quietly, self.sessions, job_id)
        return end

    def _run_batches(self, job: Job, chunk_id: int, items: list[Item], writer: ResultWriter,
                     metrics: ChunkMetrics, counted: list[int]) -> ChunkEnd:
        """The engine batches in turn, while the worker is not stopping and the job is in
        progress (the claim checked it for the first batch)."""
        run: ChunkRun | None = None
        for index, (shared, batch, alone) in enumerate(self._plan(job, items)):
            if self.stopping.is_set():
                return ChunkEnd.RELEASED
            if index:  # the last batch's results land before an expiry can fail them
                writer.flush()
            if index and self._patiently(get_job_to_change, self.sessions,
                                         job.id).status != JobStatus.IN_PROGRESS:
                return ChunkEnd.CANCELLED
            run = run or self._start(job, chunk_id, items, writer, metrics)
            if run is None:
                break  # the model cannot load: its items failed
            if alone:  # a suspect: only the one in the engine carries the attempt
                self._patiently(count_attempt, self.sessions, job.id, batch[0].item.line)
                counted.append(batch[0].item.line)
            try:
                run.generate(batch, shared)
            except Stopping:
                return ChunkEnd.RELEASED
            if alone:
                writer.flush()
        return ChunkEnd.DONE

    def _start(self, job: Job, chunk_id: int, items: list[Item], writer: ResultWriter,
               metrics: ChunkMetrics) -> ChunkRun | None:
        """The chunk's run on its job's model; None, its items failed, when the model
        cannot load."""
        try:
            engine = self.engines(str(model_path(job.model, self.config.model_dir)), self.device)
        except RankFailure:  # not the chunk's fault: the replica restarts
            raise
        except Exception as exc:  # the chunk must still end; `retry` re-queues its items
            self._not_loaded(job, items, writer, exc)
            return None
        if self.watch is not None:
            engine = _Watched(engine, partial(self.watch, job, chunk_id))
        return ChunkRun(engine, job, writer, metrics,
                        Bounds.starting(self.stopping, self.config.chunk_deadline),
                        self._patiently(account_of, self.sessions, job.owner))

    def _not_loaded(self, job: Job, items: list[Item], writer: ResultWriter,
                    failure: Exception) -> None:
        """The model could not be loaded: the job's error says why and what to do, once
        (clients read it: no server path), and each request points to it."""
        name = public_name(job.model)
        self._patiently(chunk_state.note_error, self.sessions, job.id, for_clients(mask(
            f"cannot load the model {name}: {explain(failure)}"), self.config.server_dirs()))
        writer.fail(items, MODEL_NOT_LOADED,
                    f"not run: the model {name} could not be loaded (the job's error says why)")

    def _plan(self, job: Job, items: list[Item]
              ) -> Iterator[tuple[dict[str, Any], list[Line], bool]]:
        """(shared parameters, engine batch, whether it is a suspect run alone): the items
        in large batches, then the suspects one at a time (jobs/running/suspects.py)."""
        flags = suspects([item.attempts for item in items])
        trusted = [item for item, suspect in zip(items, flags, strict=True) if not suspect]
        alone = [item for item, suspect in zip(items, flags, strict=True) if suspect]
        for shared, batch in _batches(job.params, trusted, self.batch_items):
            yield shared, batch, False
        for shared, batch in _batches(job.params, alone, 1):
            yield shared, batch, True


def _measure_quietly(sessions: sessionmaker[Session], job_id: str) -> None:
    """The ended job's result sizes, on the writer thread (off the engine's). One not
    measured here is measured by the first read that needs it."""
    try:
        measure_ended(sessions, job_id)
    except Exception as exc:  # noqa: BLE001 - nothing waits for it; a read measures instead
        log.warning("could not measure the results of job %s: %s: %s", job_id,
                    type(exc).__name__, exc)


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

    def generate(self, requests: Sequence[Prompt | GenerationRequest],
                 config: GenerationConfig | None = None,
                 on_result: Callable[[int, GenerationResult], None] | None = None
                 ) -> list[GenerationResult]:
        with self.guard():
            return self.engine.generate(requests, config, on_result)

    def constraint_error(self, spec: ConstraintSpec) -> str | None:
        return self.engine.constraint_error(spec)


def _batches(defaults: dict[str, Any], items: list[Item],
             size: int) -> list[tuple[dict[str, Any], list[Line]]]:
    """Engine batches of at most `size` lines that share their parameters (all but the
    per-row ones, which each engine request carries), in input order within each group."""
    groups: dict[str, tuple[dict[str, Any], list[Line]]] = {}
    for item in items:
        line = Line.of(defaults, item)
        shared = {k: v for k, v in line.params.items() if k not in PER_REQUEST}
        groups.setdefault(json.dumps(shared, sort_keys=True), (shared, []))[1].append(line)
    return [(shared, group[start:start + size]) for shared, group in groups.values()
            for start in range(0, len(group), size)]
