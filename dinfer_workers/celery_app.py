"""The Celery app. Messages carry only a queue's name (a permit to run its next chunk,
docs/adr/012); data and results live in SQL, so there is no result backend. A permit is
acknowledged only after its chunk ran (acks_late), a worker that dies gives it back
(reject_on_worker_lost), and each worker holds one at a time (prefetch 1). Redis
re-delivers an unacknowledged permit after the visibility timeout, which must be far
longer than a chunk takes (docs/adr/002); workers sweep for such permits every tenth of
it (kombu's default is every ~100 s whatever the timeout). There is no app at import:
each process's entry makes one from the settings it read (dinfer_workers/broker.py,
docs/adr/051)."""

from __future__ import annotations

from celery import Celery

TASK_NAME = "dinfer_batch.run_next"
# no call waits on the broker unbounded: connecting gives up after CONNECT_TIMEOUT_S, a
# read or write on an open connection after SOCKET_TIMEOUT_S (far above the 1 s polls)
CONNECT_TIMEOUT_S = 5
SOCKET_TIMEOUT_S = 30


def transport_options(timeout: int) -> dict[str, int]:
    return {"visibility_timeout": timeout,
            "unacked_restore_interval": max(1, min(60, timeout // 10)),
            "unacked_restore_throttle": 1,
            "socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_timeout": SOCKET_TIMEOUT_S}


def make_app(url: str, visibility_timeout: int) -> Celery:
    """An app on the broker at `url` (DINFER_BATCH_BROKER_URL) whose unacknowledged
    permits come back after `visibility_timeout` seconds
    (DINFER_BATCH_VISIBILITY_TIMEOUT); no task is registered on it yet."""
    app = Celery("dinfer_batch", broker=url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport_options(visibility_timeout),
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=CONNECT_TIMEOUT_S,
        worker_hijack_root_logger=False,
    )
    return app
