"""The chunk task. The service installs what running a chunk means (it owns the database);
this module owns how the chunk travels: one message per chunk, acknowledged late."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from workers.celery_app import CONNECT_TIMEOUT_S, TASK_NAME, app

ChunkHandler = Callable[[str, int], None]
_handler: list[ChunkHandler] = []


class GiveBack(Exception):
    """Raised by a handler that cannot run its chunk now (its database stayed down): the
    message goes back to the queue instead of being acknowledged as consumed."""


def install_handler(handler: ChunkHandler) -> None:
    _handler[:] = [handler]


@app.task(name=TASK_NAME)
def run_chunk(job_id: str, chunk_id: int) -> None:
    if not _handler:
        raise RuntimeError("no chunk handler installed; start workers with `dinfer-batch worker`")
    try:
        _handler[0](job_id, chunk_id)
    except GiveBack as exc:
        raise Reject(str(exc), requeue=True) from exc


def enqueue(job_id: str, task_ids: dict[int, str], queue: str) -> None:
    """Publish one message per chunk (chunk id -> task id) over one broker connection."""
    with app.producer_or_acquire() as producer:
        for chunk_id, task_id in task_ids.items():
            run_chunk.apply_async((job_id, chunk_id), queue=queue, producer=producer,
                                  task_id=task_id)


def revoke(task_ids: list[str]) -> None:
    """Best effort (an unreachable broker is ignored): running workers drop these messages;
    what really stops the work is the job's status in the database."""
    with suppress(OperationalError, OSError):
        app.control.revoke(task_ids)


def check_broker() -> None:
    """Raise ConnectionError when the broker cannot be reached (within the connect
    timeout). The message names no URL: a caller that shows one masks its password."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
    except (OperationalError, OSError) as exc:
        raise ConnectionError(f"cannot reach the broker ({exc})") from exc
