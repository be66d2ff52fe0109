"""Webhook endpoints isolated from each other, on SQLite and PostgreSQL with a real
sender, real receivers on sockets and concurrent owners: an answer trickled a byte at a
time is cut at the attempt's total deadline and is a failed attempt (never `delivered`,
even when its status line said 200); one endpoint gets at most one delivery in flight and
one owner at most PER_OWNER endpoints, so a slow owner's receivers leave the sender free
for everyone else's events."""

import threading
import time

import pytest
from sqlalchemy import select

from dinfer_batch.jobs.create import make_spec
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.spec import JobOptions
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import WebhookAttempt, WebhookDelivery
from dinfer_batch.webhooks.endpoints import add_endpoint
from dinfer_batch.webhooks.sender import PER_OWNER
from dinfer_models import MODELS_DIR
from tests.beat_helpers import receiver, trickler
from tests.service_helpers import env_settings, wait_for, webhook_sender, write_jsonl


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def failed_job(sessions, checkpoint, tmp_path, owner):
    """A job that fails at ingest (no valid line): a `batch.failed` event for `owner`."""
    spec = make_spec(str(checkpoint), {"max_tokens": 8, "block_length": 8},
                     JobOptions(queue="q", chunk_size=2, metadata={}, owner=owner), MODELS_DIR)
    path = write_jsonl(tmp_path / f"{time.monotonic_ns()}.jsonl", ["not json"])
    return ingest(sessions, path, spec, env_settings())


def deliveries(sessions, endpoint_id):
    with sessions() as session:
        return list(session.scalars(select(WebhookDelivery).where(
            WebhookDelivery.endpoint_id == endpoint_id)))


@pytest.mark.parametrize("body_only", [False, True], ids=["status-line", "body"])
def test_an_answer_trickled_past_the_deadline_is_a_failed_attempt(
        sessions, tiny_checkpoint, tmp_path, monkeypatch, body_only):
    monkeypatch.setenv("DINFER_BATCH_WEBHOOK_TIMEOUT", "1")
    with trickler(every=0.2, body_only=body_only) as slow:  # a whole answer takes 68 s
        endpoint = add_endpoint(sessions, slow.url, ["batch.failed"])
        failed_job(sessions, tiny_checkpoint, tmp_path, "local")
        sender = webhook_sender(sessions)
        [claim] = sender.claim(10)
        sender.serve(claim)
    [delivery] = deliveries(sessions, endpoint.id)
    with sessions() as session:
        [attempt] = session.scalars(select(WebhookAttempt))
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert "timed out: no complete answer within 1 s" in delivery.last_error
    assert delivery.last_status_code == (200 if body_only else None)
    assert attempt.seconds < 30  # cut at the deadline, not when the answer ended
    assert sender.claim(10) == []  # let go, and not due again until its retry


def test_a_slow_owner_delays_only_its_own_events(sessions, tiny_checkpoint, tmp_path,
                                                monkeypatch):
    """mallory's three endpoints trickle; alice's and bob's answer at once. Their events,
    recorded after mallory's many, are delivered while mallory's are still in flight,
    with at most one delivery per endpoint and PER_OWNER endpoints of mallory's open."""
    monkeypatch.setenv("DINFER_BATCH_WEBHOOK_TIMEOUT", "5")
    stop = threading.Event()
    with trickler(every=0.2) as slow, receiver() as alices, receiver() as bobs:
        mallorys = [add_endpoint(sessions, f"{slow.url}?n={n}", ["batch.failed"],
                                 owner="mallory") for n in range(3)]
        good = {owner: add_endpoint(sessions, hook.url, ["batch.failed"], owner=owner)
                for owner, hook in (("alice", alices), ("bob", bobs))}
        for _ in range(6):
            failed_job(sessions, tiny_checkpoint, tmp_path, "mallory")
        jobs = [failed_job(sessions, tiny_checkpoint, tmp_path, owner)
                for owner in ("alice", "bob", "alice")]
        webhook_sender(sessions).start(stop, poll=0.1)
        try:
            wait_for(lambda: len(alices.got) == 2 and len(bobs.got) == 1, 60)
            in_flight = slow.open_now
        finally:
            stop.set()
            wait_for(lambda: slow.open_now == 0, 60)
    assert in_flight >= 1 and slow.most_open == PER_OWNER  # never all three, nor two each
    assert {body.decode().count(job.id) for job in jobs[::2] for body, _ in alices.got} \
        >= {1}
    for endpoint in good.values():
        assert {d.status for d in deliveries(sessions, endpoint.id)} == {"delivered"}
    for endpoint in mallorys:
        assert "delivered" not in {d.status for d in deliveries(sessions, endpoint.id)}
