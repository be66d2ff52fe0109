"""Webhook endpoints and their deliveries, as `dinfer-batch webhooks` manages and shows
them."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import Row, delete, exists, or_, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import NotFound, UserError
from dinfer_batch.statuses import DeliveryStatus
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import (
    LOCAL_OWNER,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from dinfer_batch.webhooks.events import ENDED_TYPES
from dinfer_batch.webhooks.signing import new_secret

OWNER_LENGTH = 200  # the owner columns' size


@dataclass(frozen=True)
class NewEndpoint:
    id: str
    secret: str  # shown once


def parse_events(events: str) -> list[str]:
    """`batch.completed,batch.failed` -> the list; UserError naming what is not a type."""
    wanted = [name.strip() for name in events.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in ENDED_TYPES]
    if unknown or not wanted:
        raise UserError(f"--events: unknown event type {', '.join(unknown) or events!r}; "
                        f"choose from {','.join(ENDED_TYPES)}")
    return list(dict.fromkeys(wanted))


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"URL must be http:// or https:// with a host, got {url!r}")
    return url


def add_endpoint(sessions: sessionmaker[Session], url: str, events: list[str],
                 owner: str = LOCAL_OWNER) -> NewEndpoint:
    if not owner or len(owner) > OWNER_LENGTH:
        raise UserError(f"--owner must be 1 to {OWNER_LENGTH} characters, got {owner!r}")
    endpoint = WebhookEndpoint(id=f"we_{uuid.uuid4().hex}", owner=owner, url=check_url(url),
                               events=",".join(events), secret=new_secret(),
                               created_at=time.time())
    with sessions.begin() as session:
        session.add(endpoint)
    return NewEndpoint(endpoint.id, endpoint.secret)


def list_endpoints(sessions: sessionmaker[Session]) -> list[WebhookEndpoint]:
    with sessions() as session:
        return list(session.scalars(select(WebhookEndpoint)
                                    .order_by(WebhookEndpoint.created_at)))


def remove_endpoint(sessions: sessionmaker[Session], endpoint_id: str) -> int:
    """Remove the endpoint; its pending deliveries fail at once (their history stays).
    Returns how many were pending."""
    with sessions.begin() as session:
        endpoint = session.get(WebhookEndpoint, endpoint_id)
        if endpoint is None:
            raise NotFound(f"no webhook endpoint {endpoint_id!r} "
                           "(see `dinfer-batch webhooks list`)")
        session.delete(endpoint)
        return move_rows(session, DeliveryStatus.FAILED,
                         WebhookDelivery.endpoint_id == endpoint_id,
                         last_error="endpoint removed")


def list_deliveries(sessions: sessionmaker[Session], failed: bool = False,
                    limit: int = 50) -> list[Row]:
    """Newest first, with their event; `failed`: those whose last attempt failed (being
    retried, or given up)."""
    query = (select(WebhookDelivery, WebhookEvent)
             .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
             .order_by(WebhookDelivery.id.desc()).limit(limit))
    if failed:
        query = query.where(or_(WebhookDelivery.status == DeliveryStatus.FAILED,
                                (WebhookDelivery.status == DeliveryStatus.PENDING)
                                & (WebhookDelivery.attempts > 0)))
    with sessions() as session:
        return list(session.execute(query))


def prune_history(sessions: sessionmaker[Session], before: float, limit: int) -> int:
    """Delete up to `limit` finished deliveries (delivered or failed) of events older than
    `before`, their attempts, and the events left without deliveries; returns how many
    deliveries went. Pending ones stay until they end."""
    with sessions.begin() as session:
        ids = list(session.scalars(select(WebhookDelivery.id).where(
            WebhookDelivery.status != DeliveryStatus.PENDING, WebhookDelivery.created_at < before)
            .order_by(WebhookDelivery.id).limit(limit)))
        if not ids:
            return 0
        session.execute(delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(ids)))
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids)))
        session.execute(delete(WebhookEvent).where(
            WebhookEvent.created_at < before,
            ~exists().where(WebhookDelivery.event_id == WebhookEvent.id)))
    return len(ids)
