"""Signed webhooks with real `dinfer-batch worker` and `dinfer-batch beat` processes, real
Redis, SQLite and PostgreSQL, and a local receiver: an endpoint answering 500 twice gets
the event three times with one id and the official `openai` client's `unwrap` accepts it
(and refuses a wrong secret); an endpoint that is down is retried and shown as failing;
every end state records its event once, for the owner's endpoints that asked for it."""

import json
import time

import pytest
from openai import InvalidWebhookSignatureError, OpenAI
from sqlalchemy import func, select, update

from dinfer_batch.jobs import retention
from dinfer_batch.jobs.create import make_spec
from dinfer_batch.jobs.expiry import expire, get_job
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.lifecycle import cancel_job, fail_job, list_jobs
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.jobs.spec import JobOptions
from dinfer_batch.statuses import ENDED, ChunkStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Job, WebhookAttempt, WebhookDelivery, WebhookEvent
from dinfer_batch.webhooks.endpoints import add_endpoint, remove_endpoint
from dinfer_batch.webhooks.sender import GIVE_UP_S, retry_delay
from dinfer_batch.webhooks.signing import new_secret
from dinfer_models import MODELS_DIR
from tests.api_helpers import free_port
from tests.beat_helpers import receiver, start_beat
from tests.service_helpers import env_settings, wait_for, webhook_sender, write_jsonl

pytestmark = pytest.mark.integration

SHORT = ("--max-tokens", "8", "--block-length", "8")


def cli_ok(service, *args):
    result = service.cli(*args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_an_endpoint_answering_500_twice_gets_one_signed_event_three_times(service, tmp_path):
    with receiver(500, 500) as hook, receiver() as bobs:
        endpoint_id, secret = cli_ok(service, "webhooks", "add", hook.url, "--events",
                                     "batch.completed").splitlines()
        assert endpoint_id.startswith("we_") and secret.startswith("whsec_")
        cli_ok(service, "webhooks", "add", bobs.url, "--owner", "bob")  # not bob's job
        nobody = f"http://127.0.0.1:{free_port()}/hooks"  # nothing listens there
        down_id = cli_ok(service, "webhooks", "add", nobody).splitlines()[0]
        listed = [json.loads(line) for line in
                  cli_ok(service, "webhooks", "list", "--json").splitlines()]
        assert [e["id"] for e in listed if e["owner"] == "local"] == [endpoint_id, down_id]
        assert listed[0]["events"] == ["batch.completed"] and secret not in str(listed)

        start_beat(service, tmp_path / "beat.log", DINFER_BATCH_WEBHOOK_RETRY_SECONDS="0.2")
        service.start_worker(tmp_path / "worker.log")
        path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"add {i} 1="} for i in range(3)])
        job_id = cli_ok(service, "submit", path, *SHORT)
        assert service.wait_job(job_id, lambda job: job.status in ENDED).status == "completed"
        wait_for(lambda: len(hook.got) == 3, 60)
        time.sleep(1.0)  # delivered: no fourth attempt
        assert len(hook.got) == 3 and bobs.got == []

    bodies = {body for body, _ in hook.got}
    assert len(bodies) == 1  # the same event each time
    assert len({headers["Webhook-Id"] for _, headers in hook.got}) == 1
    body, headers = hook.got[-1]
    event = OpenAI(api_key="unused", webhook_secret=secret).webhooks.unwrap(body, headers)
    assert (event.type, event.object, event.data.id) == ("batch.completed", "event", job_id)
    assert event.id.startswith("evt_") and headers["Webhook-Id"] == event.id
    with pytest.raises(InvalidWebhookSignatureError):
        OpenAI(api_key="unused", webhook_secret=new_secret()).webhooks.unwrap(body, headers)
    with pytest.raises(InvalidWebhookSignatureError):  # a body changed on the way
        OpenAI(api_key="unused", webhook_secret=secret).webhooks.unwrap(
            body.replace(b"completed", b"cancelled"), headers)

    sessions = service.sessions()
    with sessions() as session:
        delivery = session.scalar(select(WebhookDelivery).where(
            WebhookDelivery.endpoint_id == endpoint_id))
        codes = list(session.scalars(select(WebhookAttempt.status_code).where(
            WebhookAttempt.delivery_id == delivery.id).order_by(WebhookAttempt.id)))
        down = session.scalar(select(WebhookDelivery).where(
            WebhookDelivery.endpoint_id == down_id))
    assert (delivery.status, delivery.attempts, codes) == ("delivered", 3, [500, 500, 200])
    assert delivery.event_id == event.id
    assert down.status == "pending" and down.attempts >= 1
    assert "ConnectionRefusedError" in down.last_error
    failing = cli_ok(service, "webhooks", "deliveries", "--failed", "--json").splitlines()
    assert [json.loads(line)["endpoint"] for line in failing] == [down_id]
    shown = {json.loads(line)["endpoint"]: json.loads(line) for line in
             cli_ok(service, "webhooks", "deliveries", "--json").splitlines()}
    assert shown[endpoint_id] | {"next": None} == {
        "event": event.id, "type": "batch.completed", "job": job_id, "endpoint": endpoint_id,
        "status": "delivered", "attempts": 3, "last": 200, "next": None}
    assert "local" in cli_ok(service, "webhooks", "list")  # the table



def _events(sessions):
    with sessions() as session:
        return sorted((e.job_id, e.type, d.endpoint_id) for e, d in session.execute(
            select(WebhookEvent, WebhookDelivery)
            .join(WebhookDelivery, WebhookDelivery.event_id == WebhookEvent.id)))


def test_every_end_state_records_its_event_once_for_the_owners_endpoints(
        database_url, tiny_checkpoint, tmp_path):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    every = add_endpoint(sessions, "http://127.0.0.1:9/a", ["batch.completed", "batch.failed",
                                                            "batch.cancelled", "batch.expired"])
    only_failed = add_endpoint(sessions, "http://127.0.0.1:9/b", ["batch.failed"])
    add_endpoint(sessions, "http://127.0.0.1:9/c", ["batch.completed"], owner="bob")

    def job(lines, **kwargs):
        spec = make_spec(str(tiny_checkpoint), {"max_tokens": 8, "block_length": 8},
                         JobOptions(queue="q", chunk_size=2, metadata={}, **kwargs), MODELS_DIR)
        return ingest(sessions, write_jsonl(tmp_path / f"{time.monotonic()}.jsonl", lines),
                      spec, env_settings())

    good = [{"prompt": "add 1 1="}]
    done = job(good)
    chunk_state.claim(sessions, done.id, 0, "w", "cpu", 60)
    chunk_state.record(sessions, done.id, [chunk_state.Outcome(line=1, text="2")])
    chunk_state.finish(sessions, done.id, 0, ChunkStatus.DONE, chunk_state.ChunkMetrics())
    chunk_state.settle(sessions, done.id)  # a second settle records nothing more
    invalid = job(["not json"])  # fails at ingest
    cancelled = job(good)
    cancel_job(sessions, cancelled.id)
    crashed = job(good)
    fail_job(sessions, crashed.id, "the embedded run crashed")
    fail_job(sessions, crashed.id, "again")  # already ended: nothing
    late = job(good, completion_window="1h")
    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == late.id).values(expires_at=time.time()))
    assert get_job(sessions, late.id).status == "expired"  # a read shows it, writes nothing
    assert late.id in {job.id for job in list_jobs(sessions, "expired", 10)}
    assert (late.id, "batch.expired", every.id) not in _events(sessions)
    assert expire(sessions, late.id) and not expire(sessions, late.id)
    bobs = job(good, owner="bob")
    cancel_job(sessions, bobs.id)  # bob's endpoint wants batch.completed only

    assert _events(sessions) == sorted([
        (done.id, "batch.completed", every.id), (invalid.id, "batch.failed", every.id),
        (invalid.id, "batch.failed", only_failed.id),
        (cancelled.id, "batch.cancelled", every.id), (crashed.id, "batch.failed", every.id),
        (crashed.id, "batch.failed", only_failed.id), (late.id, "batch.expired", every.id)])

    assert remove_endpoint(sessions, every.id) == 5  # its pending deliveries stop
    with sessions() as session:
        left = session.scalars(select(WebhookDelivery.status).where(
            WebhookDelivery.endpoint_id == every.id))
        assert set(left) == {"failed"}


def test_a_delivery_still_failing_after_24_hours_is_given_up(database_url, tiny_checkpoint,
                                                             tmp_path):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    add_endpoint(sessions, f"http://127.0.0.1:{free_port()}/hooks", ["batch.failed"])
    spec = make_spec(str(tiny_checkpoint), {"max_tokens": 8, "block_length": 8},
                     JobOptions(queue="q", chunk_size=2, metadata={}), MODELS_DIR)
    ingest(sessions, write_jsonl(tmp_path / "bad.jsonl", ["not json"]), spec, env_settings())
    sender = webhook_sender(sessions)
    [first] = sender.claim(10)
    assert sender.claim(10) == []  # claimed: not sent twice
    sender.serve(first)
    with sessions() as session:
        delivery = session.get_one(WebhookDelivery, first.delivery_id)
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert delivery.next_attempt_at == pytest.approx(time.time() + retry_delay(1, 5), abs=2)
    with sessions.begin() as session:  # a day later
        session.execute(update(WebhookDelivery).values(
            created_at=time.time() - GIVE_UP_S + 1, next_attempt_at=time.time()))
    [again] = sender.claim(10)
    sender.serve(again)
    with sessions() as session:
        delivery = session.get_one(WebhookDelivery, first.delivery_id)
    assert (delivery.status, delivery.attempts) == ("failed", 2)
    assert sender.claim(10) == []
    assert [retry_delay(n, 5) for n in (1, 2, 3, 8)] == [5, 20, 80, 7200]


def test_a_timeout_is_retried_with_the_same_event(database_url, tiny_checkpoint, tmp_path,
                                                  monkeypatch):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    monkeypatch.setenv("DINFER_BATCH_WEBHOOK_TIMEOUT", "0.5")
    with receiver(delays=(3.0,)) as hook:
        added = add_endpoint(sessions, hook.url, ["batch.failed"])
        spec = make_spec(str(tiny_checkpoint), {"max_tokens": 8, "block_length": 8},
                         JobOptions(queue="q", chunk_size=2, metadata={}), MODELS_DIR)
        job = ingest(sessions, write_jsonl(tmp_path / "bad.jsonl", ["not json"]), spec,
                     env_settings())
        sender = webhook_sender(sessions)
        [first] = sender.claim(10)
        sender.serve(first)  # the receiver answers after 3 s: too late
        with sessions.begin() as session:
            session.execute(update(WebhookDelivery).values(next_attempt_at=time.time()))
        sender.serve(sender.claim(10)[0])
    with sessions() as session:
        delivery = session.get_one(WebhookDelivery, first.delivery_id)
        errors = list(session.scalars(select(WebhookAttempt.error).order_by(WebhookAttempt.id)))
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert "timed out" in errors[0] and errors[1] is None
    assert [h["Webhook-Id"] for _, h in hook.got] == [delivery.event_id] * 2
    event = OpenAI(api_key="unused", webhook_secret=added.secret).webhooks.unwrap(*hook.got[1])
    assert (event.type, event.data.id) == ("batch.failed", job.id)


@pytest.mark.parametrize(("args", "message"), [
    (("add", "ftp://example.com/x"), "URL must be http:// or https://"),
    (("add", "http://example.com/x", "--events", "batch.done"),
     "unknown event type 'batch.done'"),
    (("add", "http://example.com/x", "--owner", ""), "--owner must be 1 to 200"),
    (("remove", "we_nope"), "no webhook endpoint 'we_nope'"),
])
def test_bad_webhook_commands_exit_2_saying_why(sqlite_service, args, message):
    result = sqlite_service.cli("webhooks", *args)
    assert result.exit_code == 2 and message in result.output
    assert cli_ok(sqlite_service, "webhooks", "list", "--json") == ""


def test_retention_deletes_finished_deliveries_older_than_it(database_url, monkeypatch):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    now, old = time.time(), time.time() - 3 * 86400
    with sessions.begin() as session:
        for name, created, status in (("old", old, "delivered"), ("stuck", old, "pending"),
                                      ("new", now, "failed")):
            session.add(WebhookEvent(id=f"evt_{name}", type="batch.completed",
                                     job_id="batch_x", created_at=created))
            session.add(WebhookDelivery(event_id=f"evt_{name}", endpoint_id="we_x",
                                        status=status, attempts=1, next_attempt_at=created,
                                        created_at=created))
        session.flush()
        for delivery_id in session.scalars(select(WebhookDelivery.id)):
            session.add(WebhookAttempt(delivery_id=delivery_id, attempted_at=old,
                                       status_code=200, seconds=0.1))
    # no retention period: kept
    assert retention.retention_pass(sessions, env_settings().retention_days) == 0
    monkeypatch.setenv("DINFER_BATCH_RETENTION_DAYS", "2")
    assert retention.retention_pass(sessions, env_settings().retention_days) == 1
    with sessions() as session:
        events = set(session.scalars(select(WebhookEvent.id)))
        attempts = session.scalar(select(func.count()).select_from(WebhookAttempt))
        statuses = set(session.scalars(select(WebhookDelivery.status)))
    assert events == {"evt_stuck", "evt_new"} and attempts == 2
    assert statuses == {"pending", "failed"}
