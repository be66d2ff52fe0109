"""The dispatch task is registered by a worker on the app its entry made, bound to its
handler (dinfer_workers/tasks.py, docs/adr/051): not at import, and on no other app."""

from __future__ import annotations

import pytest
from celery.exceptions import Reject

from dinfer_workers.celery_app import TASK_NAME, make_app
from dinfer_workers.tasks import GiveBack, register


def test_the_task_runs_the_handler_it_was_registered_with_on_its_app_only():
    taken: list[str] = []
    app, other = make_app("memory://", 60), make_app("memory://", 60)
    assert TASK_NAME not in app.tasks  # a new app has no dispatch task

    register(app, taken.append)
    app.tasks[TASK_NAME]("q1")
    assert taken == ["q1"]
    assert TASK_NAME not in other.tasks
    assert (app.conf.task_acks_late, app.conf.worker_prefetch_multiplier) == (True, 1)


def test_a_handler_that_gives_back_requeues_the_permit():
    def give_back(queue: str) -> None:
        raise GiveBack(f"{queue}: the database stayed down")

    app = make_app("memory://", 60)
    register(app, give_back)
    with pytest.raises(Reject) as rejected:
        app.tasks[TASK_NAME]("q")
    assert rejected.value.requeue and "q: the database stayed down" in str(rejected.value)
