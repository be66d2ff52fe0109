"""Start one Celery worker process for one model replica."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from celery import Celery
from celery.signals import setup_logging, worker_ready

from dinfer_workers import logs
from dinfer_workers.tasks import QueueHandler, register

log = logging.getLogger(__name__)


def pin_device(device: str, ranks: int = 1) -> str:
    """Pin `cuda:N` (and the next ranks - 1 GPUs, for a tensor-parallel replica) through
    CUDA_VISIBLE_DEVICES, before anything touches CUDA, and return the device name as
    this process will see it."""
    if device.startswith("cuda:"):
        first = int(device.removeprefix("cuda:"))
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + r) for r in range(ranks))
        return "cuda:0"
    return device


def start_worker(app: Celery, handler: QueueHandler, queues: list[str], name: str,
                 preload: tuple[str, str] | None, load: Callable[[str, str], object],
                 log_level: str = "info") -> None:
    """Run a solo-pool worker (one process, one chunk at a time) named `name` on `app`
    (made by the process's entry, dinfer_workers/broker.py) until it is stopped, each
    permit it takes run by `handler`. `preload` (model, device) is loaded by `load` (the
    process's engine cache) once the worker is up, in the process that runs the chunks.
    Logging is ours (dinfer_workers/logs.py), not Celery's."""
    register(app, handler)
    logs.without_root_warning()
    setup_logging.connect(lambda **_: logs.configure(log_level, name), weak=False)

    def ready(**_: object) -> None:
        if preload is not None:
            load(*preload)
        log.info("ready: %s takes queues %s%s", name, ",".join(queues),
                 f", model {preload[0]} on {preload[1]}" if preload else "")

    worker_ready.connect(ready, weak=False)
    app.worker_main([
        "--quiet", "worker", "--pool=solo", "--concurrency=1",
        f"--queues={','.join(queues)}", f"--hostname={name}", f"--loglevel={log_level}",
        "--without-gossip", "--without-mingle",
    ])
