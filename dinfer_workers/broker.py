"""What a process says to the broker: publish permits, count the ones waiting (kombu keeps
a queue's waiting messages in a list named after it; delivered ones move to its `unacked`
hash) and check that it answers. A `Broker` is made by each process's entry from the
settings it read (the command line's commands that publish, the API app, a worker, beat)
and handed down (docs/adr/051): nothing below finds a broker on its own, so two in one
process (the tests' services) never share one."""

from __future__ import annotations

from types import TracebackType

import redis
from kombu.exceptions import OperationalError

from dinfer_workers.celery_app import CONNECT_TIMEOUT_S, TASK_NAME, make_app


class Broker:
    """The Celery app at `url` (a worker registers its task on `app`) and a Redis client
    for the counts; each opens its connections on first use and `close` returns them."""

    def __init__(self, url: str, visibility_timeout: int) -> None:
        self.app = make_app(url, visibility_timeout)
        self.redis = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)

    def waiting(self, queue: str) -> int:
        """Messages waiting in the queue, not yet delivered to a worker."""
        return int(self.redis.llen(queue))

    def publish(self, queue: str, count: int) -> None:
        """Publish `count` permits for the queue over one broker connection."""
        with self.app.producer_or_acquire() as producer:
            for _ in range(count):
                self.app.send_task(TASK_NAME, (queue,), queue=queue, producer=producer,
                                   ignore_result=True)

    def check(self) -> None:
        """Raise ConnectionError when the broker cannot be reached (within the connect
        timeout). The message names no URL: a caller that shows one masks its password."""
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
        except (OperationalError, OSError) as exc:
            raise ConnectionError(f"cannot reach the broker ({exc})") from exc

    def close(self) -> None:
        self.app.close()
        self.redis.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
