"""The sender: delivers recorded events to their endpoints, on threads of the `beat`
process (never a worker's, never a submit's), so an endpoint that is down slows only its
own deliveries.

A delivery is claimed by moving its `next_attempt_at` past the attempt's longest possible
time, under the condition that it still holds the value read (as beat claims schedule
runs), so two beat processes never send it at once and a sender that dies mid-attempt
leaves it to be tried again: at least once. Each attempt is a POST of the same body with
the same `webhook-id` (the event's id), signed afresh with its own timestamp, and is
recorded in webhook_attempts. A non-2xx answer, a timeout or a refused connection is
retried after DINFER_BATCH_WEBHOOK_RETRY_SECONDS (default 5), then four times longer
each time up to 2 h between attempts; a delivery not made within 24 h of its event
fails."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import webhook_retry_seconds, webhook_timeout
from dinfer_batch.storage.tables import (
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from dinfer_batch.webhooks.events import event_body
from dinfer_batch.webhooks.signing import signed_headers

log = logging.getLogger("dinfer_batch.webhooks")

GIVE_UP_S = 24 * 3600
MAX_DELAY_S = 2 * 3600
THREADS = 8  # deliveries in flight at once
CLAIM_MARGIN_S = 60  # on top of the timeout: a claim outlives any attempt


def retry_delay(attempts: int, first: float) -> float:
    """Seconds before the next attempt after `attempts` failed ones."""
    return min(first * 4 ** (attempts - 1), MAX_DELAY_S)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not a delivery: it counts as the non-2xx answer it is."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, body: bytes, headers: dict[str, str],
         timeout: float) -> tuple[int | None, str | None]:
    """(HTTP status, None), or (status or None, what went wrong)."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers | {
        "Content-Type": "application/json", "User-Agent": "dinfer-batch-webhooks"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            response.read(65536)
            return response.status, None
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:  # refused, timed out, bad address
        reason = getattr(exc, "reason", None) or exc
        return None, f"{type(reason).__name__}: {reason}"


class Sender:
    """`claim()` then `attempt(id)` make one attempt; `start()` runs them on threads."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.timeout = webhook_timeout()
        self.first_retry = webhook_retry_seconds()
        self._in_flight = 0
        self._lock = threading.Lock()

    def claim(self, limit: int, now: float | None = None) -> list[int]:
        """Claim up to `limit` due deliveries, oldest due first; returns their ids."""
        now = now or time.time()
        with self.sessions() as session:
            due = session.execute(
                select(WebhookDelivery.id, WebhookDelivery.next_attempt_at)
                .where(WebhookDelivery.status == "pending",
                       WebhookDelivery.next_attempt_at <= now)
                .order_by(WebhookDelivery.next_attempt_at).limit(limit)).all()
        claimed = []
        for delivery_id, due_at in due:
            with self.sessions.begin() as session:
                if session.execute(
                        update(WebhookDelivery)
                        .where(WebhookDelivery.id == delivery_id,
                               WebhookDelivery.status == "pending",
                               WebhookDelivery.next_attempt_at == due_at)
                        .values(next_attempt_at=now + self.timeout + CLAIM_MARGIN_S)
                ).rowcount:
                    claimed.append(delivery_id)
        return claimed

    def attempt(self, delivery_id: int) -> None:
        """One POST of a claimed delivery, and its record."""
        with self.sessions() as session:
            delivery = session.get_one(WebhookDelivery, delivery_id)
            event = session.get_one(WebhookEvent, delivery.event_id)
            endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
        if delivery.status != "pending":  # its endpoint was removed meanwhile
            return
        if endpoint is None:
            self._close(delivery_id, "failed", last_error="endpoint removed")
            return
        body = event_body(event)
        headers = signed_headers(endpoint.secret, event.id, int(time.time()), body)
        started = time.monotonic()
        code, error = post(endpoint.url, body, headers, self.timeout)
        self._record(delivery, code, error, time.monotonic() - started)

    def _record(self, delivery: WebhookDelivery, code: int | None, error: str | None,
                seconds: float) -> None:
        now = time.time()
        attempts = delivery.attempts + 1
        values: dict[str, Any] = {"attempts": attempts, "last_status_code": code,
                                  "last_error": error}
        if error is None and code is not None and 200 <= code < 300:
            values |= {"status": "delivered", "delivered_at": now}
        else:
            following = now + retry_delay(attempts, self.first_retry)
            if following > delivery.created_at + GIVE_UP_S:
                values["status"] = "failed"
                log.warning("webhook: delivery %d of %s failed for 24 h; given up",
                            delivery.id, delivery.event_id)
            else:
                values["next_attempt_at"] = following
        with self.sessions.begin() as session:
            session.add(WebhookAttempt(delivery_id=delivery.id, attempted_at=now,
                                       status_code=code, error=error, seconds=seconds))
            session.execute(update(WebhookDelivery)
                            .where(WebhookDelivery.id == delivery.id).values(**values))

    def _close(self, delivery_id: int, status: str, last_error: str) -> None:
        with self.sessions.begin() as session:
            session.execute(update(WebhookDelivery).where(WebhookDelivery.id == delivery_id)
                            .values(status=status, last_error=last_error))

    def start(self, stop: threading.Event, poll: float = 0.5) -> threading.Thread:
        """Claim due deliveries every `poll` seconds, up to THREADS in flight, and send
        them on a pool, until `stop` is set. A pass that fails (the database away) is
        logged and the next one tries again."""
        pool = ThreadPoolExecutor(THREADS, thread_name_prefix="dinfer-webhook")

        def send(delivery_id: int) -> None:
            try:
                self.attempt(delivery_id)
            except Exception:  # its claim runs out, and it is tried again
                log.exception("webhook: delivery %d: attempt not recorded", delivery_id)
            finally:
                with self._lock:
                    self._in_flight -= 1

        def loop() -> None:
            while not stop.is_set():
                try:
                    with self._lock:
                        free = THREADS - self._in_flight
                    for delivery_id in self.claim(free) if free else []:
                        with self._lock:
                            self._in_flight += 1
                        pool.submit(send, delivery_id)
                except Exception:
                    log.exception("webhook sender pass failed; trying again")
                stop.wait(poll)
            pool.shutdown(wait=False, cancel_futures=True)

        thread = threading.Thread(target=loop, name="dinfer-webhook-sender", daemon=True)
        thread.start()
        return thread
