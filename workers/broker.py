"""What the reaper asks Redis: which chunks still have a message (waiting in a queue, or
delivered and not yet acknowledged), and whether Redis lost its data since the last look.

Redis keeps a queue's messages in a list named after the queue and delivered ones in
kombu's `unacked` hash. A restart without persistence empties both; a per-queue marker key
written after each check tells the reaper so: when it is gone, so are the messages, and
the open chunks without one must be published again from SQL."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from workers.celery_app import broker_url

MARKER = "dinfer_batch:checked:{queue}"
LOCK = "dinfer_batch:checking:{queue}"
UNACKED = "unacked"  # kombu's hash of delivered, unacknowledged messages
PAGE = 1000


class Broker:
    def __init__(self, url: str | None = None) -> None:
        self.redis = redis.Redis.from_url(url or broker_url(), socket_timeout=10,
                                          socket_connect_timeout=5)

    def checked(self, queue: str) -> bool:
        """Whether the queue's messages were checked since Redis last lost its data."""
        return bool(self.redis.exists(MARKER.format(queue=queue)))

    def mark_checked(self, queue: str) -> None:
        self.redis.set(MARKER.format(queue=queue), str(time.time()))

    @contextmanager
    def checking(self, queue: str, seconds: int = 120) -> Iterator[bool]:
        """A short lock so that of several reapers one checks a queue at a time; yields
        whether this one holds it."""
        key, token = LOCK.format(queue=queue), uuid.uuid4().hex
        held = bool(self.redis.set(key, token, nx=True, ex=seconds))
        try:
            yield held
        finally:
            if held and self.redis.get(key) == token.encode():
                self.redis.delete(key)

    def chunks_with_messages(self, queue: str) -> set[tuple[str, int]]:
        """(job_id, chunk_id) of every message waiting in the queue or delivered and not
        acknowledged (task ids are `job.chunk.retry`, see lifecycle.chunk_task_id)."""
        messages = []
        start = 0
        while True:
            page = self.redis.lrange(queue, start, start + PAGE - 1)
            messages += [json.loads(raw) for raw in page]
            if len(page) < PAGE:
                break
            start += PAGE
        for _tag, raw in self.redis.hscan_iter(UNACKED, count=PAGE):
            message, _exchange, routing_key = json.loads(raw)
            if routing_key == queue:
                messages.append(message)
        return {chunk for chunk in map(_chunk, messages) if chunk is not None}


def _chunk(message: dict) -> tuple[str, int] | None:
    try:
        job_id, chunk_id, _retry = message["headers"]["id"].split(".")
        return job_id, int(chunk_id)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not one of our chunk messages
