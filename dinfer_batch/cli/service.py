"""Commands that run the service: a worker, and database migrations."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager

import click

from dinfer_batch.config import (
    chunk_timeout,
    database_url,
    default_model,
    default_queue,
    engine_batch_items,
)
from dinfer_batch.device import check_device
from dinfer_batch.jobs.lifecycle import chunk_task_id
from dinfer_batch.jobs.runner import ChunkRunner
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db as database
from dinfer_batch.storage.tables import Job

log = logging.getLogger(__name__)


@click.command()
@click.option("--model", default=default_model, show_default="models/demo",
              help="Model to load as soon as the worker is ready (others load on demand).")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--queues", default=default_queue, show_default="dinfer_batch",
              help="Comma-separated queues to take chunks from.")
def worker(model: str, device: str, queues: str) -> None:
    """Run one worker: one process, one model replica, one chunk at a time.

    Start one per GPU (`--device cuda:N` pins it with CUDA_VISIBLE_DEVICES) on any machine
    that reaches the same Redis and database. Stop it with Ctrl-C; a killed worker's
    chunk goes back to the queue after the visibility timeout and is resumed. An engine
    call that runs longer than DINFER_BATCH_CHUNK_TIMEOUT seconds (default 1800) counts as
    hung: its chunk is re-queued and the worker restarts itself. Example:

        dinfer-batch worker --device cuda:0 --model /models/LLaDA-8B-Instruct
    """
    from workers.launcher import pin_device, start_worker, worker_name

    queue_list = [q for q in queues.split(",") if q]
    if not queue_list:
        raise click.BadParameter(f"no queue in {queues!r}", param_hint="--queues")
    model_path = load_model_info(model).path  # a wrong --model is refused, not logged later
    pinned = pin_device(device)
    check_device(pinned, requested=device)
    timeout = chunk_timeout()
    sessions = database.ready(database_url())
    runner = ChunkRunner(sessions, device=pinned, worker=worker_name(queue_list),
                         batch_items=engine_batch_items(),
                         watch=_hang_watchdog(timeout) if timeout else None)
    start_worker(runner, queue_list, preload=(model_path, pinned))


def _hang_watchdog(seconds: float) -> Callable[[Job, int], AbstractContextManager[None]]:
    """What the worker does about an engine call still running after `seconds`: publish
    its chunk again (a fresh worker resumes its pending items), then restart this process
    with the same command line. The hung chunk's own message stays unacknowledged, so
    Redis re-delivers it after the visibility timeout; by then it is done and skipped."""
    from workers.tasks import enqueue
    from workers.watchdog import recycle, watching

    argv = [sys.executable, "-m", "dinfer_batch", *sys.argv[1:]]

    def requeue_and_recycle(job: Job, chunk_id: int) -> None:
        log.error("an engine call on chunk %d of %s ran past DINFER_BATCH_CHUNK_TIMEOUT=%gs",
                  chunk_id, job.id, seconds)
        try:
            enqueue(job.id, {chunk_id: chunk_task_id(job, chunk_id)}, job.queue)
        except Exception as exc:  # noqa: BLE001 - the visibility timeout re-delivers it
            log.error("could not re-queue the chunk: %s", exc)
        recycle(argv)

    return lambda job, chunk_id: watching(seconds, lambda: requeue_and_recycle(job, chunk_id))


@click.group()
def db() -> None:
    """Database schema commands."""


@db.command()
def upgrade() -> None:
    """Apply every migration to DINFER_BATCH_DATABASE_URL (creates the schema)."""
    url = database_url()
    database.upgrade(url)
    click.echo(f"{database.db_engine(url).url.render_as_string(hide_password=True)} "
               "is at the latest schema")
