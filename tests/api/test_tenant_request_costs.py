"""Requests counted at their cost (formats/lines/cost.py) on a real database (SQLite, then
PostgreSQL), without workers: chunks cut by cost, not lines; the quota refuses a batch at
its true cost; fair share charges a chunk at its cost; a retry asks for it again; each
item and the job keep their cost for the line's metrics and the batch's usage."""

import json

import pytest
from sqlalchemy import select

from dinfer_batch.jobs.intake.quota import QuotaExceeded, usage
from dinfer_batch.jobs.lifecycle import cancel_job, retry_job
from dinfer_batch.jobs.reading.view import job_object
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Chunk, Item
from tests.api.test_tenant_costs import submit
from tests.service.test_dispatch import drain
from tests.service_helpers import env_settings

COMMON = {"max_tokens": 8, "block_length": 4}
SEARCH = {"suffix": "b", "infill_lengths": list(range(1, 9))} | COMMON  # 8 candidates
EDITING = {"decoder": "editing", "max_post_steps": 12} | COMMON  # 1 + 12 / 4 = 4


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def lines(count, tag, **fields):
    return [json.dumps({"prompt": f"{tag}{i}"} | fields) for i in range(count)]


def chunks_of(sessions, job_id):
    with sessions() as session:
        return session.execute(select(Chunk.size, Chunk.cost).where(Chunk.job_id == job_id)
                               .order_by(Chunk.chunk_id)).all()


def test_chunks_are_cut_by_cost_not_lines(sessions, tmp_path, tiny_checkpoint, queue):
    search = submit(sessions, tmp_path, tiny_checkpoint, queue, lines(10, "s", **SEARCH),
                    chunk_size=32)
    assert [tuple(c) for c in chunks_of(sessions, search.id)] == [(4, 32), (4, 32), (2, 16)]
    editing = submit(sessions, tmp_path, tiny_checkpoint, queue,
                     lines(5, "e", **EDITING) + lines(3, "p", **COMMON), chunk_size=10)
    assert [tuple(c) for c in chunks_of(sessions, editing.id)] == [(2, 8), (2, 8), (4, 7)]
    # a line that alone costs more than a chunk holds still runs, in a chunk of its own
    big = submit(sessions, tmp_path, tiny_checkpoint, queue, lines(2, "b", n=3, **SEARCH),
                 chunk_size=16)
    assert [tuple(c) for c in chunks_of(sessions, big.id)] == [(1, 24), (1, 24)]
    with sessions() as session:
        costs = session.scalars(select(Item.cost).where(Item.job_id == editing.id)
                                .order_by(Item.line)).all()
        assert costs == [4] * 5 + [1] * 3
        job = session.get(type(search), search.id)
        assert job is not None and job_object(job)["usage"]["cost"] == 80


def test_the_quota_refuses_a_batch_at_its_true_cost(sessions, tmp_path, tiny_checkpoint,
                                                    queue, monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_MAX_ENQUEUED_REQUESTS", "40")
    with pytest.raises(QuotaExceeded) as refused:  # 6 lines, 48 generations
        submit(sessions, tmp_path, tiny_checkpoint, queue, lines(6, "s", **SEARCH))
    assert (refused.value.usage, refused.value.asked) == (0, 48)
    with pytest.raises(QuotaExceeded) as refused:  # 11 editing lines: 44
        submit(sessions, tmp_path, tiny_checkpoint, queue, lines(11, "e", **EDITING))
    assert refused.value.asked == 44
    first = submit(sessions, tmp_path, tiny_checkpoint, queue, lines(9, "e", **EDITING))
    with sessions() as session:
        assert usage(session, "alice") == (36, 0)
    with pytest.raises(QuotaExceeded) as refused:  # 36 + 8 > 40
        submit(sessions, tmp_path, tiny_checkpoint, queue, lines(1, "s", **SEARCH))
    assert (refused.value.usage, refused.value.asked) == (36, 8)
    # a retry asks for its lines at their cost again
    cancel_job(sessions, first.id)
    assert submit(sessions, tmp_path, tiny_checkpoint, queue, lines(5, "s", **SEARCH))
    with pytest.raises(QuotaExceeded) as refused:
        retry_job(sessions, first.id, env_settings())
    assert (refused.value.usage, refused.value.asked) == (40, 36)


def test_fair_share_charges_a_chunk_at_its_cost(sessions, tmp_path, tiny_checkpoint, queue):
    """Alice's chunks hold 2 search lines (16 generations), Bob's 2 plain lines (2): Bob
    gets eight turns for each of Alice's (counted by lines, they would alternate)."""
    alice = submit(sessions, tmp_path, tiny_checkpoint, queue, lines(16, "s", **SEARCH),
                   "alice", chunk_size=16)
    bob = submit(sessions, tmp_path, tiny_checkpoint, queue, lines(40, "p", **COMMON), "bob",
                 chunk_size=2)
    assert {tuple(c) for c in chunks_of(sessions, alice.id)} == {(2, 16)}
    order = drain(sessions, queue, 10)
    assert order == [alice.id] + [bob.id] * 8 + [alice.id]
