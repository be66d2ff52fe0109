"""The sender: delivers recorded events to their endpoints, on threads of the `beat`
process (never a worker's, never a submit's).

Endpoints are isolated from each other (docs/adr/018-tenant-reads-and-webhooks.md): a
sender holds an endpoint while it sends to it (`webhook_endpoints.claimed_until`, set by
a conditional UPDATE), so at most one delivery per endpoint is in flight across every
beat process; the thread that holds it sends that endpoint's due deliveries one after
the other (up to BURST), then lets it go. A beat keeps at most PER_OWNER endpoints of one
owner in flight among its THREADS, so a slow or dead receiver holds one thread (at most
PER_OWNER for its owner) and delays only its own owner's events. Each attempt has a total
deadline (webhooks/post.py): an answer not read to its end within
DINFER_BATCH_WEBHOOK_TIMEOUT is a failed attempt, never `delivered`.

A delivery is claimed by moving its `next_attempt_at` past the attempt's longest possible
time, under the condition that it still holds the value read (as beat claims schedule
runs), so two beat processes never send it at once and a sender that dies mid-attempt
leaves it (and its endpoint's claim) to run out and be tried again: at least once. Each
attempt is a POST of the same body with the same `webhook-id` (the event's id), signed
afresh with its own timestamp, and is recorded in webhook_attempts. A non-2xx answer, a
timeout or a refused connection is retried after DINFER_BATCH_WEBHOOK_RETRY_SECONDS
(default 5), then four times longer each time up to 2 h between attempts; a delivery not
made within 24 h of its event fails."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.statuses import DeliveryStatus
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import (
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from dinfer_batch.webhooks.events import event_body
from dinfer_batch.webhooks.post import post
from dinfer_batch.webhooks.signing import signed_headers

log = logging.getLogger("dinfer_batch.webhooks")

GIVE_UP_S = 24 * 3600
MAX_DELAY_S = 2 * 3600
THREADS = 32  # endpoints sent to at once by one beat
PER_OWNER = 2  # of which one owner's at most
BURST = 100  # deliveries sent to one endpoint before it is let go (others get a turn)
CLAIM_MARGIN_S = 60  # on top of the deadline: a claim outlives any attempt


def retry_delay(attempts: int, first: float) -> float:
    """Seconds before the next attempt after `attempts` failed ones."""
    return min(first * 4 ** (attempts - 1), MAX_DELAY_S)


def _has_due(now: float) -> Any:
    """The endpoint has a pending delivery due by `now`."""
    return exists().where(WebhookDelivery.endpoint_id == WebhookEndpoint.id,
                          WebhookDelivery.status == DeliveryStatus.PENDING,
                          WebhookDelivery.next_attempt_at <= now)


@dataclass(frozen=True)
class Claim:
    """A delivery claimed for one attempt, with its endpoint held until it is recorded."""

    delivery_id: int
    endpoint_id: str
    owner: str


class Sender:
    """`claim()` then `attempt(claim)` make one attempt; `start()` runs them on threads."""

    def __init__(self, sessions: sessionmaker[Session], timeout: float,
                 first_retry: float) -> None:
        """`timeout`: one POST's limit, `first_retry`: the wait before a failed delivery's
        first retry (DINFER_BATCH_WEBHOOK_TIMEOUT, _RETRY_SECONDS)."""
        self.sessions = sessions
        self.timeout = timeout
        self.first_retry = first_retry
        self._owners: Counter[str] = Counter()  # endpoints in flight per owner
        self._lock = threading.Lock()

    def claim(self, limit: int, now: float | None = None,
              busy: Counter[str] | None = None) -> list[Claim]:
        """Claim up to `limit` free endpoints that have a due delivery, each with its
        oldest due delivery, and at most PER_OWNER endpoints per owner counting `busy`
        (the owner's endpoints already in flight)."""
        now = now or time.time()
        with self.sessions() as session:
            free = session.execute(
                select(WebhookEndpoint.id, WebhookEndpoint.owner)
                .where(or_(WebhookEndpoint.claimed_until.is_(None),
                           WebhookEndpoint.claimed_until <= now), _has_due(now))
                .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)).all()
        claims: list[Claim] = []
        taken = Counter(busy or {})
        for endpoint_id, owner in free:
            if len(claims) >= limit:
                break
            if taken[owner] >= PER_OWNER:
                continue
            claim = self._claim_endpoint(endpoint_id, owner, now)
            if claim is not None:
                claims.append(claim)
                taken[owner] += 1
        return claims

    def _claim_endpoint(self, endpoint_id: str, owner: str, now: float) -> Claim | None:
        until = now + self.timeout + CLAIM_MARGIN_S
        with self.sessions.begin() as session:
            if not changed(session, update(WebhookEndpoint).where(
                    WebhookEndpoint.id == endpoint_id,
                    or_(WebhookEndpoint.claimed_until.is_(None),
                        WebhookEndpoint.claimed_until <= now))
                    .values(claimed_until=until)):
                return None
            claim = self._claim_delivery(session, endpoint_id, owner, now, until)
            if claim is None:  # nothing due any more: not held for nothing
                session.execute(update(WebhookEndpoint).where(
                    WebhookEndpoint.id == endpoint_id).values(claimed_until=None))
            return claim

    def next_delivery(self, held: Claim, now: float | None = None) -> Claim | None:
        """The next due delivery of the endpoint `held` holds (its claim renewed), or
        None (the endpoint still held: `release` it)."""
        now = now or time.time()
        until = now + self.timeout + CLAIM_MARGIN_S
        with self.sessions.begin() as session:
            if changed(session, update(WebhookEndpoint).where(
                    WebhookEndpoint.id == held.endpoint_id).values(claimed_until=until)):
                claim = self._claim_delivery(session, held.endpoint_id, held.owner, now,
                                             until)
                if claim is not None:
                    return claim
        return None

    def _claim_delivery(self, session: Session, endpoint_id: str, owner: str, now: float,
                        until: float) -> Claim | None:
        due = session.execute(
            select(WebhookDelivery.id, WebhookDelivery.next_attempt_at)
            .where(WebhookDelivery.endpoint_id == endpoint_id,
                   WebhookDelivery.status == DeliveryStatus.PENDING,
                   WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id).limit(1)).first()
        if due is None or not changed(session, update(WebhookDelivery).where(
                WebhookDelivery.id == due.id, WebhookDelivery.status == DeliveryStatus.PENDING,
                WebhookDelivery.next_attempt_at == due.next_attempt_at)
                .values(next_attempt_at=until)):
            return None
        return Claim(due.id, endpoint_id, owner)

    def release(self, held: Claim) -> None:
        """Let the endpoint go: another delivery to it may be sent now."""
        with self.sessions.begin() as session:
            session.execute(update(WebhookEndpoint)
                            .where(WebhookEndpoint.id == held.endpoint_id)
                            .values(claimed_until=None))

    def attempt(self, claim: Claim) -> None:
        """One POST of a claimed delivery, and its record (the endpoint stays held)."""
        with self.sessions() as session:
            delivery = session.get_one(WebhookDelivery, claim.delivery_id)
            event = session.get_one(WebhookEvent, delivery.event_id)
            endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
        if delivery.status != DeliveryStatus.PENDING:  # its endpoint was removed meanwhile
            return
        if endpoint is None:
            self._close(claim.delivery_id, last_error="endpoint removed")
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
        to: DeliveryStatus | None = None  # None: still pending, tried again later
        if error is None and code is not None and 200 <= code < 300:
            to, values = DeliveryStatus.DELIVERED, values | {"delivered_at": now}
        else:
            following = now + retry_delay(attempts, self.first_retry)
            if following > delivery.created_at + GIVE_UP_S:
                to = DeliveryStatus.FAILED
                log.warning("webhook: delivery %d of %s failed for 24 h; given up",
                            delivery.id, delivery.event_id)
            else:
                values["next_attempt_at"] = following
        with self.sessions.begin() as session:
            session.add(WebhookAttempt(delivery_id=delivery.id, attempted_at=now,
                                       status_code=code, error=error, seconds=seconds))
            this = WebhookDelivery.id == delivery.id
            if to is None:
                session.execute(update(WebhookDelivery).where(this).values(**values))
            else:
                move_rows(session, to, this, **values)

    def _close(self, delivery_id: int, last_error: str) -> None:
        with self.sessions.begin() as session:
            move_rows(session, DeliveryStatus.FAILED, WebhookDelivery.id == delivery_id,
                      last_error=last_error)

    def serve(self, claim: Claim, stop: threading.Event | None = None) -> None:
        """Send the held endpoint's due deliveries one after the other (up to BURST, or
        until `stop` is set), then let it go. An attempt that fails to be recorded (the
        database away) keeps the endpoint held until its claim runs out, and is tried
        again then."""
        held = claim
        for _ in range(BURST - 1):
            self.attempt(held)
            following = None if stop and stop.is_set() else self.next_delivery(held)
            if following is None:
                break
            held = following
        else:
            self.attempt(held)
        self.release(held)

    def start(self, stop: threading.Event, poll: float = 0.5) -> threading.Thread:
        """Claim endpoints with due deliveries every `poll` seconds, up to THREADS and
        PER_OWNER of one owner, and serve each on a pool, until `stop` is set. A pass
        that fails (the database away) is logged and the next one tries again."""
        pool = ThreadPoolExecutor(THREADS, thread_name_prefix="dinfer-webhook")

        def send(claim: Claim) -> None:
            try:
                self.serve(claim, stop)
            except Exception:  # its claims run out, and it is tried again
                log.exception("webhook: endpoint %s: attempt not recorded", claim.endpoint_id)
            finally:
                with self._lock:
                    self._owners[claim.owner] -= 1

        def loop() -> None:
            while not stop.is_set():
                try:
                    with self._lock:
                        busy = +self._owners
                    free = THREADS - sum(busy.values())
                    for claim in self.claim(free, busy=busy) if free > 0 else []:
                        with self._lock:
                            self._owners[claim.owner] += 1
                        pool.submit(send, claim)
                except Exception:
                    log.exception("webhook sender pass failed; trying again")
                stop.wait(poll)
            pool.shutdown(wait=False, cancel_futures=True)

        thread = threading.Thread(target=loop, name="dinfer-webhook-sender", daemon=True)
        thread.start()
        return thread
