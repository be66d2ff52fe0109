"""The dispatch task. The service says what running a chunk means (it owns the database
and chooses the chunk); this module owns how a permit is taken: a message carries only
its queue's name and is acknowledged late (docs/adr/012-dispatch-and-quotas.md). The task
is registered by the worker on the app its entry made, with its handler (never at import,
docs/adr/051); publishers send it by name (dinfer_workers/broker.py)."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery
from celery.exceptions import Reject

from dinfer_workers.celery_app import TASK_NAME

QueueHandler = Callable[[str], None]  # runs the next chunk of the queue it is given


class GiveBack(Exception):
    """Raised by a handler that cannot run a chunk now (its database stayed down): the
    message goes back to the queue instead of being acknowledged as consumed."""


def register(app: Celery, handler: QueueHandler) -> None:
    """Register the dispatch task on `app`: each permit taken runs `handler` on its queue."""

    def run_next(queue: str) -> None:
        try:
            handler(queue)
        except GiveBack as exc:
            raise Reject(str(exc), requeue=True) from exc

    app.task(name=TASK_NAME, shared=False)(run_next)  # this app only, not every later one
