"""The dispatch task. The service installs what running a chunk means (it owns the
database and chooses the chunk); this module owns how permits travel: a message carries
only its queue's name and is acknowledged late (docs/adr/012-dispatch-and-quotas.md)."""

from __future__ import annotations

from collections.abc import Callable

from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from dinfer_workers.celery_app import CONNECT_TIMEOUT_S, TASK_NAME, app

QueueHandler = Callable[[str], None]  # runs the next chunk of the queue it is given
_handler: list[QueueHandler] = []


class GiveBack(Exception):
    """Raised by a handler that cannot run a chunk now (its database stayed down): the
    message goes back to the queue instead of being acknowledged as consumed."""


def install_handler(handler: QueueHandler) -> None:
    _handler[:] = [handler]


@app.task(name=TASK_NAME)
def run_next(queue: str) -> None:
    if not _handler:
        raise RuntimeError("no chunk handler installed; start workers with `dinfer-batch worker`")
    try:
        _handler[0](queue)
    except GiveBack as exc:
        raise Reject(str(exc), requeue=True) from exc


def publish(queue: str, count: int) -> None:
    """Publish `count` permits for the queue over one broker connection."""
    with app.producer_or_acquire() as producer:
        for _ in range(count):
            run_next.apply_async((queue,), queue=queue, producer=producer)


def check_broker() -> None:
    """Raise ConnectionError when the broker cannot be reached (within the connect
    timeout). The message names no URL: a caller that shows one masks its password."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
    except (OperationalError, OSError) as exc:
        raise ConnectionError(f"cannot reach the broker ({exc})") from exc
