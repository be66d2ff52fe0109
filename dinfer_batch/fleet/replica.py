"""One worker process (one model replica): registers in the workers table, heartbeats and
reaps on background threads, runs chunks from Celery, and stops warm on SIGTERM/SIGINT:
the chunk in hand keeps its finished results and goes back to the queue at once. The
process's broker (its Celery app) is made here, from the settings its command read."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.device import check_device
from dinfer_batch.fleet.heartbeat import Heartbeat
from dinfer_batch.fleet.reaper import Reaper, Tenure, reap_interval
from dinfer_batch.jobs.running.chunk_state import release
from dinfer_batch.jobs.running.dispatch import top_up
from dinfer_batch.jobs.running.engine_options import configure_engines
from dinfer_batch.jobs.running.runner import ChunkEnd, ChunkRunner
from dinfer_batch.model_info import ModelInfo
from dinfer_batch.storage import db as database
from dinfer_batch.storage import registry
from dinfer_batch.storage.registry import WorkerState
from dinfer_batch.storage.tables import Job
from dinfer_workers.broker import Broker
from dinfer_workers.engine_cache import RankFailure

log = logging.getLogger(__name__)
RANK_LOST_EXIT = 3  # a tensor-parallel rank died; the supervisor restarts the replica


@dataclass
class ReplicaHandler:
    """The dispatch task's handler: claims the queue's next chunk, runs it, keeps the
    heartbeat's figures, and tops up the queue's permits before the permit in hand is
    acknowledged (a released chunk is then taken by another worker at once)."""

    runner: ChunkRunner
    state: WorkerState
    broker: Broker

    def __call__(self, queue: str) -> None:
        try:
            self._run_next(queue)
        finally:
            try:
                top_up(self.runner.sessions, self.broker, queue,
                       self.runner.config.worker_timeout)
            except Exception as exc:  # noqa: BLE001 - the reaper's next pass tops up
                log.warning("could not top up queue %s: %s: %s", queue, type(exc).__name__,
                            exc)

    def _run_next(self, queue: str) -> None:
        claimed = self.runner.claim_next_chunk(queue)
        if claimed is None:
            return
        job_id, chunk_id, items = claimed
        self.state.job_id, self.state.chunk_id = job_id, chunk_id
        try:
            ended = self.runner.run_claimed(job_id, chunk_id, items)
        except RankFailure as exc:
            # the replica goes down as a whole: its chunk comes back as for any dead worker
            log.critical("stopping the replica: %s", exc)
            logging.shutdown()
            os._exit(RANK_LOST_EXIT)
        finally:
            self.state.job_id = self.state.chunk_id = None
            self.state.prefix_tokens_reused = self.runner.prefix_tokens_reused
        if ended is ChunkEnd.RELEASED:
            log.warning("stopping: chunk %s/%s queued again", job_id, chunk_id)
        else:
            self._count(job_id, chunk_id, ended)

    def _count(self, job_id: str, chunk_id: int, ended: ChunkEnd) -> None:
        """The heartbeat's figures, from what the runner counted (no read of the chunk)."""
        ran = self.runner.last
        self.state.items_done += ran.items
        self.state.tokens += ran.completion_tokens
        self.state.busy_s += ran.seconds
        rate = ran.completion_tokens / ran.seconds if ran.seconds else 0.0
        log.info("job %s chunk %d %s: %d items, %d tokens in %.1f s, %.1f tokens/s", job_id,
                 chunk_id, ended, ran.items, ran.completion_tokens, ran.seconds, rate)


def run_replica(config: Settings, info: ModelInfo, device: str, queues: list[str], name: str,
                requested: str | None = None, tensor_parallel: int = 1,
                log_level: str = "info") -> None:
    """Run until stopped, on `config` (read at the process's entry, the command line), with
    `info`'s model preloaded. `device` is as this process sees
    it (already pinned), the first of `tensor_parallel` ranks' devices; `requested` is
    what the user typed, for error messages."""
    from celery.signals import worker_shutting_down

    from dinfer_workers.engine_cache import rank_devices
    from dinfer_workers.launcher import start_worker

    devices = rank_devices(device, tensor_parallel)
    for rank_device in devices:
        check_device(rank_device, requested=requested if tensor_parallel == 1 else None)
    engines = configure_engines(tensor_parallel, config)
    timeout = config.chunk_timeout
    sessions = database.ready_for(config)
    worker_id = f"{name}/{uuid.uuid4().hex[:8]}"
    runner = ChunkRunner(sessions, device=device, worker=worker_id,
                         batch_items=config.engine_batch_items, config=config,
                         engines=engines)
    state = WorkerState()
    broker = Broker(config.broker_url, config.visibility_timeout)
    reaper = Reaper(sessions, broker, config.worker_timeout)
    worker_shutting_down.connect(lambda **_: runner.stopping.set(), weak=False)
    # until Celery installs its warm-stop handler, SIGTERM is a clean exit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tenure = Tenure(worker_id, reap_interval(config.heartbeat_seconds))
    heartbeat = Heartbeat(sessions, worker_id, state, config.heartbeat_seconds,
                          config.worker_timeout, also=tenure.ask_in)
    reaping = threading.Event()
    if timeout:
        runner.watch = hang_watchdog(timeout, heartbeat.stop, sessions, broker, worker_id,
                                     config.worker_timeout)
    try:
        registry.register(sessions, worker_id, name, info.name, ",".join(devices), queues)
        heartbeat.start()
        reaper.start(tenure, reaping)
        start_worker(broker.app, ReplicaHandler(runner, state, broker), queues, name,
                     preload=(info.path, device), load=engines, log_level=log_level)
    finally:
        reaping.set()  # lets the reaper's lease go
        heartbeat.stop()


def hang_watchdog(seconds: float, stopped: Callable[[], None], sessions: sessionmaker[Session],
                  broker: Broker, worker: str, worker_timeout: float
                  ) -> Callable[[Job, int], AbstractContextManager[None]]:
    """What the worker does about an engine call still running after `seconds`
    (DINFER_BATCH_CHUNK_TIMEOUT): mark itself stopped (`stopped`), queue its chunk again
    with the attempt still counted (a fresh worker resumes its pending items), top up the
    queue's permits, and restart this process with the same command line. The hung
    permit stays unacknowledged; Redis re-delivers it after the visibility timeout, as a
    permit like any other."""
    from dinfer_workers.watchdog import recycle, watching

    argv = [sys.executable, "-m", "dinfer_batch", *sys.argv[1:]]

    def requeue_and_recycle(job: Job, chunk_id: int) -> None:
        log.error("an engine call on chunk %d of %s ran past DINFER_BATCH_CHUNK_TIMEOUT=%gs",
                  chunk_id, job.id, seconds)
        stopped()
        try:
            release(sessions, job.id, chunk_id, worker)  # its attempts still count
            top_up(sessions, broker, job.queue, worker_timeout)
        except Exception as exc:  # noqa: BLE001 - the reaper takes it back from a dead worker
            log.error("could not re-queue the chunk: %s", exc)
        recycle(argv)

    return lambda job, chunk_id: watching(seconds, lambda: requeue_and_recycle(job, chunk_id))
