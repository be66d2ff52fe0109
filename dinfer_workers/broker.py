"""What dispatch asks Redis: how many messages wait in a queue (kombu keeps a queue's
waiting messages in a list named after it; delivered ones move to its `unacked` hash)."""

from __future__ import annotations

from functools import lru_cache

import redis

from dinfer_workers.settings import broker_settings


class Broker:
    def __init__(self, url: str | None = None) -> None:
        self.redis = redis.Redis.from_url(url or broker_settings().url, socket_timeout=10,
                                          socket_connect_timeout=5)

    def waiting(self, queue: str) -> int:
        """Messages waiting in the queue, not yet delivered to a worker."""
        return int(self.redis.llen(queue))


@lru_cache(maxsize=4)
def _broker(url: str) -> Broker:
    return Broker(url)


def broker() -> Broker:
    """One client (and connection pool) per broker URL for the process."""
    return _broker(broker_settings().url)
