"""Start one Celery worker process for one model replica."""

from __future__ import annotations

import os

from celery.signals import worker_ready

from workers.celery_app import app
from workers.engines import get_engine
from workers.tasks import QueueHandler, install_handler


def pin_device(device: str, ranks: int = 1) -> str:
    """Pin `cuda:N` (and the next ranks - 1 GPUs, for a tensor-parallel replica) through
    CUDA_VISIBLE_DEVICES, before anything touches CUDA, and return the device name as
    this process will see it."""
    if device.startswith("cuda:"):
        first = int(device.removeprefix("cuda:"))
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + r) for r in range(ranks))
        return "cuda:0"
    return device


def start_worker(handler: QueueHandler, queues: list[str], name: str,
                 preload: tuple[str, str] | None, loglevel: str = "INFO") -> None:
    """Run a solo-pool worker (one process, one chunk at a time) named `name` until it is
    stopped. `preload` (model, device) is loaded once the worker is up, in the process
    that runs the chunks."""
    install_handler(handler)
    if preload is not None:
        worker_ready.connect(lambda **_: get_engine(*preload), weak=False)
    app.worker_main([
        "worker", "--pool=solo", "--concurrency=1", f"--queues={','.join(queues)}",
        f"--hostname={name}", f"--loglevel={loglevel}", "--without-gossip",
        "--without-mingle",
    ])
