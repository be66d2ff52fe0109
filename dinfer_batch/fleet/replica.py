"""One worker process (one model replica): registers in the workers table, heartbeats and
reaps on background threads, runs chunks from Celery, and stops warm on SIGTERM/SIGINT:
the chunk in hand keeps its finished results and goes back to the queue at once."""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from dinfer_batch.config import chunk_timeout, database_url, engine_batch_items, heartbeat_seconds
from dinfer_batch.device import check_device
from dinfer_batch.fleet import registry
from dinfer_batch.fleet.heartbeat import Heartbeat
from dinfer_batch.fleet.reaper import Reaper, reap_interval
from dinfer_batch.fleet.registry import WorkerState
from dinfer_batch.jobs.lifecycle import chunk_task_id, get_job
from dinfer_batch.jobs.runner import ChunkRunner
from dinfer_batch.model_info import ModelInfo
from dinfer_batch.storage import db as database
from dinfer_batch.storage.tables import Chunk, Job
from workers.engine_cache import RankFailure
from workers.tasks import enqueue

log = logging.getLogger(__name__)
RANK_LOST_EXIT = 3  # a tensor-parallel rank died; the supervisor restarts the replica


@dataclass
class ReplicaHandler:
    """The chunk task's handler: runs the chunk, keeps the heartbeat's figures, and
    publishes a released chunk again so that another worker takes it at once."""

    runner: ChunkRunner
    state: WorkerState

    def __call__(self, job_id: str, chunk_id: int) -> None:
        self.state.job_id, self.state.chunk_id = job_id, chunk_id
        try:
            ended = self.runner(job_id, chunk_id)
        except RankFailure as exc:
            # the replica goes down as a whole: its chunk comes back as for any dead worker
            log.critical("stopping the replica: %s", exc)
            logging.shutdown()
            os._exit(RANK_LOST_EXIT)
        finally:
            self.state.job_id = self.state.chunk_id = None
        if ended == "released":
            job = get_job(self.runner.sessions, job_id)
            enqueue(job_id, {chunk_id: chunk_task_id(job, chunk_id)}, job.queue)
            log.warning("stopping: chunk %s/%s queued again", job_id, chunk_id)
        elif ended is not None:
            self._count(job_id, chunk_id)

    def _count(self, job_id: str, chunk_id: int) -> None:
        with self.runner.sessions() as session:
            chunk = session.get_one(Chunk, (job_id, chunk_id))
        self.state.items_done += chunk.size
        self.state.tokens += chunk.completion_tokens
        self.state.busy_s += chunk.seconds
        rate = chunk.completion_tokens / chunk.seconds if chunk.seconds else 0.0
        log.info("job %s chunk %d %s: %d items, %d tokens in %.1f s, %.1f tokens/s", job_id,
                 chunk_id, chunk.status, chunk.size, chunk.completion_tokens, chunk.seconds,
                 rate)


def run_replica(info: ModelInfo, device: str, queues: list[str], name: str,
                requested: str | None = None, tensor_parallel: int = 1,
                log_level: str = "info") -> None:
    """Run until stopped, with `info`'s model preloaded. `device` is as this process sees
    it (already pinned), the first of `tensor_parallel` ranks' devices; `requested` is
    what the user typed, for error messages."""
    from celery.signals import worker_shutting_down

    from workers.engine_cache import rank_devices, set_tensor_parallel
    from workers.launcher import start_worker

    devices = rank_devices(device, tensor_parallel)
    for rank_device in devices:
        check_device(rank_device, requested=requested if tensor_parallel == 1 else None)
    set_tensor_parallel(tensor_parallel)
    timeout = chunk_timeout()
    sessions = database.ready(database_url())
    worker_id = f"{name}/{uuid.uuid4().hex[:8]}"
    runner = ChunkRunner(sessions, device=device, worker=worker_id,
                         batch_items=engine_batch_items())
    state = WorkerState()
    reaper = Reaper(sessions)
    worker_shutting_down.connect(lambda **_: runner.stopping.set(), weak=False)
    # until Celery installs its warm-stop handler, SIGTERM is a clean exit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    heartbeat = Heartbeat(sessions, worker_id, state, heartbeat_seconds())
    if timeout:
        runner.watch = hang_watchdog(timeout, stopped=heartbeat.stop)
    try:
        registry.register(sessions, worker_id, name, info.name, ",".join(devices), queues)
        heartbeat.start()
        reaper.start(reap_interval())
        start_worker(ReplicaHandler(runner, state), queues, name,
                     preload=(info.path, device), log_level=log_level)
    finally:
        heartbeat.stop()


def hang_watchdog(seconds: float, stopped: Callable[[], None]
                  ) -> Callable[[Job, int], AbstractContextManager[None]]:
    """What the worker does about an engine call still running after `seconds`
    (DINFER_BATCH_CHUNK_TIMEOUT): mark itself stopped (`stopped`: its chunk is then free
    to claim, the attempt still counted), publish the chunk again (a fresh worker resumes
    its pending items), and restart this process with the same command line. The hung
    chunk's own message stays unacknowledged, so Redis re-delivers it after the visibility
    timeout; by then it is done and skipped."""
    from workers.watchdog import recycle, watching

    argv = [sys.executable, "-m", "dinfer_batch", *sys.argv[1:]]

    def requeue_and_recycle(job: Job, chunk_id: int) -> None:
        log.error("an engine call on chunk %d of %s ran past DINFER_BATCH_CHUNK_TIMEOUT=%gs",
                  chunk_id, job.id, seconds)
        stopped()
        try:
            enqueue(job.id, {chunk_id: chunk_task_id(job, chunk_id)}, job.queue)
        except Exception as exc:  # noqa: BLE001 - the visibility timeout re-delivers it
            log.error("could not re-queue the chunk: %s", exc)
        recycle(argv)

    return lambda job, chunk_id: watching(seconds, lambda: requeue_and_recycle(job, chunk_id))
