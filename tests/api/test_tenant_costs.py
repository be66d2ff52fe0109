"""Tenants on a real database (SQLite, then PostgreSQL), without workers: requests counted at
their cost (lines x n, invalid lines too) in quotas and in fair share, a retry under the
same check, entitlements enforced at ingest, per-request ceilings, and SQLite's ingest in
short transactions that leave nothing behind when a file is refused (docs/adr/017)."""

import threading
import uuid

import pytest
from sqlalchemy import func, select, text

from dinfer_batch.errors import UserError
from dinfer_batch.formats.parameters.ceilings import CEILINGS
from dinfer_batch.formats.parameters.params import SERVICE_CHECKS
from dinfer_batch.jobs.intake import slices
from dinfer_batch.jobs.intake.entitlements import NotEntitled
from dinfer_batch.jobs.intake.ingest import INSERT_BATCH, ingest
from dinfer_batch.jobs.intake.quota import QuotaExceeded, usage
from dinfer_batch.jobs.lifecycle import cancel_job, retry_job
from dinfer_batch.jobs.spec import Entitlements, JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Chunk, Item, Job
from dinfer_engine.fields import Integer, Number
from dinfer_engine.generation_fields import FIELDS
from dinfer_models import MODELS_DIR
from tests.service.test_dispatch import drain
from tests.service_helpers import env_settings


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def submit(sessions, tmp_path, model, queue, lines, owner="alice", chunk_size=8, **spec):
    path = tmp_path / f"{uuid.uuid4().hex}.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    spec = JobSpec(model=load_model_info(str(model), MODELS_DIR), queue=queue,
                   chunk_size=chunk_size, owner=owner, **spec)
    return ingest(sessions, path, spec, env_settings())


def prompts(count, tag="p", **params):
    import json

    return [json.dumps({"prompt": f"{tag}{i}", **params}) for i in range(count)]


def counts(sessions):
    with sessions() as session:
        return tuple(session.scalar(select(func.count()).select_from(table))
                     for table in (Job, Item, Chunk))


def test_chunks_hold_generations_and_fair_share_charges_them(sessions, tmp_path,
                                                             tiny_checkpoint, queue):
    alice = submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(8, n=4), "alice")
    bob = submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(40), "bob", chunk_size=2)
    with sessions() as session:
        chunks = session.execute(select(Chunk.job_id, Chunk.size, Chunk.cost)).all()
        assert usage(session, "alice") == (32, 0)  # 8 lines x n=4
    assert {(size, cost) for job, size, cost in chunks if job == alice.id} == {(2, 8)}
    assert {(size, cost) for job, size, cost in chunks if job == bob.id} == {(2, 2)}
    order = drain(sessions, queue, 10)  # equal generations: one of alice's per four of bob's
    assert [order.count(alice.id), order.count(bob.id)] == [2, 8]


def test_quota_counts_samples_and_invalid_lines_and_leaves_nothing(sessions, tmp_path,
                                                                   tiny_checkpoint, queue,
                                                                   monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_MAX_ENQUEUED_REQUESTS", "10")
    with pytest.raises(QuotaExceeded) as refused:  # 2 lines x n=8 = 16 generations
        submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(2, n=8))
    assert (refused.value.usage, refused.value.asked) == (0, 16)
    with pytest.raises(QuotaExceeded) as refused:  # invalid lines were stored: they count
        submit(sessions, tmp_path, tiny_checkpoint, queue, ["{}"] * 12)
    assert refused.value.asked == 12
    # a big file of invalid lines is refused while it is read, and removed again
    with pytest.raises(QuotaExceeded) as refused:
        submit(sessions, tmp_path, tiny_checkpoint, queue, ["{}"] * (2 * INSERT_BATCH + 7))
    assert counts(sessions) == (0, 0, 0)
    # one upload made into two batches counts twice
    lines = prompts(6)
    submit(sessions, tmp_path, tiny_checkpoint, queue, lines)
    with pytest.raises(QuotaExceeded) as refused:
        submit(sessions, tmp_path, tiny_checkpoint, queue, lines)
    assert (refused.value.usage, refused.value.asked) == (6, 6)
    assert counts(sessions)[0] == 1


def test_a_retry_passes_the_same_quota_check(sessions, tmp_path, tiny_checkpoint, queue,
                                             monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_MAX_ENQUEUED_REQUESTS", "10")
    first = submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(4, n=2))
    cancel_job(sessions, first.id)
    submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(6, "q"))
    with pytest.raises(QuotaExceeded) as refused:  # 6 enqueued + 4 lines x n=2 > 10
        retry_job(sessions, first.id, env_settings())
    assert (refused.value.usage, refused.value.asked) == (6, 8)
    with sessions() as session:
        job = session.get_one(Job, first.id)
        queued = session.scalar(select(func.count()).select_from(Chunk).where(
            Chunk.job_id == first.id, Chunk.status == "queued"))
    assert (job.status, job.retries, queued) == ("cancelled", 0, 0)  # nothing changed
    monkeypatch.setenv("DINFER_BATCH_MAX_ENQUEUED_REQUESTS", "14")
    assert retry_job(sessions, first.id, env_settings())


def test_entitlements_are_enforced_where_the_job_is_made(sessions, tmp_path,
                                                         tiny_checkpoint, queue):
    tenant = Entitlements(max_priority=0, max_chunk_size=16, max_request_tokens=64,
                          max_batch_requests=INSERT_BATCH + 10)
    with pytest.raises(NotEntitled, match=r"priority high \(1\) is above"):
        submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(1), priority=1,
               entitled=tenant)
    with pytest.raises(NotEntitled, match="chunk_size 32 is above this key's largest, 16"):
        submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(1), chunk_size=32,
               entitled=tenant)
    with pytest.raises(NotEntitled, match="more than 5,010 lines"):  # refused on the way
        submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(2 * INSERT_BATCH),
               entitled=tenant)
    assert counts(sessions) == (0, 0, 0)
    job = submit(sessions, tmp_path, tiny_checkpoint, queue,
                 prompts(2, max_tokens=8, block_length=8) + prompts(1, "x", max_tokens=8,
                                                                    block_length=8, n=9),
                 entitled=tenant)
    with sessions() as session:
        failed = session.scalars(select(Item.error_message).where(
            Item.job_id == job.id, Item.status == "failed")).all()
    assert failed == ["line 3: max_tokens=8 x n=9 = 72 tokens is above this key's "
                      "max_request_tokens of 64; ask for fewer tokens or samples"]


def test_every_numeric_parameter_has_a_ceiling_and_lines_over_it_fail_alone(
        sessions, tmp_path, tiny_checkpoint, queue):
    numeric = {field.service_name for field in FIELDS.values()
               if field.request and isinstance(field.check, Integer | Number)}
    assert numeric <= set(CEILINGS)
    assert set(CEILINGS) - numeric <= set(SERVICE_CHECKS)  # the service's own: n, infill
    context = load_model_info(str(tiny_checkpoint), MODELS_DIR).max_context
    over = {"prefix_look": 10**12, "after_look": context + 1, "warmup_steps": context + 1,
            "steps": 16, "top_k": 10**6}
    editing = {"num_to_transfer": 9, "max_post_steps": context + 1}
    job = submit(sessions, tmp_path, tiny_checkpoint, queue,
                 prompts(1, "ok", max_tokens=8, block_length=8)
                 + [prompts(1, name, max_tokens=8, block_length=8, **{name: value})[0]
                    for name, value in over.items()]
                 + [prompts(1, name, max_tokens=8, block_length=8, decoder="editing",
                            **{name: value})[0] for name, value in editing.items()])
    with sessions() as session:
        errors = session.scalars(select(Item.error_message).where(Item.job_id == job.id)
                                 .order_by(Item.line)).all()
    assert errors[0] is None
    for (name, value), error in zip([*over.items(), *editing.items()], errors[1:],
                                    strict=True):
        assert f"{name} must be at most" in error and f"got {value:,}" in error, error


def test_a_refused_file_leaves_nothing_behind(sessions, tmp_path, tiny_checkpoint, queue):
    lines = prompts(INSERT_BATCH + 100)
    lines[INSERT_BATCH + 50] = '{"prompt": "again", "custom_id": "twice"}'
    lines[3] = '{"prompt": "first", "custom_id": "twice"}'
    with pytest.raises(UserError, match="duplicate custom_id 'twice' on lines 4 and 5051"):
        submit(sessions, tmp_path, tiny_checkpoint, queue, lines)
    with pytest.raises(UserError, match="has no requests"):
        submit(sessions, tmp_path, tiny_checkpoint, queue, [])
    assert counts(sessions) == (0, 0, 0)


def test_sqlite_ingests_in_short_transactions_that_readers_never_wait_for(
        sqlite_url, tmp_path, tiny_checkpoint, queue, monkeypatch):
    db.upgrade(sqlite_url)
    sessions = db.ready(sqlite_url)
    seen = []
    commit = slices.Slices.commit

    def observed(self):
        commit(self)
        with sessions() as session:  # another connection: what is committed so far
            seen.append(session.execute(select(Job.status, func.count(Item.line))
                                        .join(Item, Item.job_id == Job.id, isouter=True)
                                        .group_by(Job.id)).one())

    monkeypatch.setattr(slices.Slices, "commit", observed)
    job = submit(sessions, tmp_path, tiny_checkpoint, queue, prompts(2 * INSERT_BATCH + 3))
    assert seen == [("validating", 0), ("validating", INSERT_BATCH),
                    ("validating", 2 * INSERT_BATCH), ("validating", 2 * INSERT_BATCH + 3)]
    assert sessions().get(Job, job.id).status == "in_progress"

    # a reading session does not wait for a writer holding the lock
    held, done = threading.Event(), threading.Event()

    def writer():
        with sessions.begin() as session:
            session.execute(text("UPDATE jobs SET served = served"))
            held.set()
            done.wait(60)

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    with sessions() as session:
        assert session.get(Job, job.id).status == "in_progress"
    finished_first = not done.is_set()
    done.set()
    thread.join()
    assert finished_first
