"""Events: when a job reaches its end state, the transaction that moves it there also
records one event (`evt_...`) and a pending delivery for each of its owner's endpoints
that asked for that type. So no event is lost, none is recorded twice (the status moves
under a condition, once), and the job's worker never waits for an endpoint: the sender
(webhooks/sender.py) delivers them later."""

from __future__ import annotations

import json
import time
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from dinfer_batch.statuses import ENDED, DeliveryStatus, JobStatus
from dinfer_batch.storage.tables import Job, WebhookDelivery, WebhookEndpoint, WebhookEvent

ENDED_TYPES = tuple(f"batch.{status}" for status in ENDED)  # batch.completed, ...


def record_end(session: Session, job_id: str, status: JobStatus,
               owner: str | None = None) -> None:
    """Inside the transaction that ended job `job_id` with `status` (completed, failed,
    cancelled, expired): its event and deliveries, when an endpoint wants them."""
    event_type = f"batch.{status}"
    if owner is None:
        owner = session.scalar(select(Job.owner).where(Job.id == job_id))
    endpoints = [endpoint_id for endpoint_id, events in session.execute(
        select(WebhookEndpoint.id, WebhookEndpoint.events)
        .where(WebhookEndpoint.owner == owner)) if event_type in events.split(",")]
    if not endpoints:
        return
    now = time.time()
    event_id = f"evt_{uuid.uuid4().hex}"
    session.add(WebhookEvent(id=event_id, type=event_type, job_id=job_id, created_at=now))
    session.add_all([WebhookDelivery(event_id=event_id, endpoint_id=endpoint_id,
                                     status=DeliveryStatus.PENDING.value, attempts=0,
                                     next_attempt_at=now, created_at=now)
                     for endpoint_id in endpoints])


def event_body(event: WebhookEvent) -> bytes:
    """OpenAI's event object; the same bytes on every attempt."""
    return json.dumps({"id": event.id, "object": "event", "type": event.type,
                       "created_at": int(event.created_at),
                       "data": {"id": event.job_id}}, separators=(",", ":")).encode()
