"""Claims made together, on a real database: none waits on another claim's open
transaction, each takes a chunk of its own, and the fair share is charged for every
chunk whatever order the charges land in (docs/adr/064-claims-that-do-not-wait.md)."""

import threading
from collections import Counter

import psycopg
import pytest
from sqlalchemy import select

from dinfer_batch.config import DbPool
from dinfer_batch.jobs.fair_share import CLOCK
from dinfer_batch.jobs.running.dispatch import claim_next_chunk
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import FairShare, Job
from tests.service.test_dispatch import make_job

CLAIMERS = 8


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


@pytest.mark.integration
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_claim_takes_the_next_chunk_while_another_claim_holds_the_first(
        sessions, database_url, tmp_path, tiny_checkpoint, queue):
    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=3)
    holder = psycopg.connect(database_url.replace("+psycopg", ""))
    try:  # a claim in the middle of its transaction: chunk 0 locked, not yet committed
        holder.execute("SELECT 1 FROM chunks WHERE job_id = %s AND chunk_id = 0 FOR UPDATE",
                       (job,))
        claimed: list = []
        claimer = threading.Thread(target=lambda: claimed.append(
            claim_next_chunk(sessions, queue, "w/2", "cpu", 60)), daemon=True)
        claimer.start()
        claimer.join(timeout=20)
        assert not claimer.is_alive(), "the claim waited on the other claim's lock"
        assert claimed[0][:2] == (job, 1)
    finally:
        holder.rollback()
        holder.close()
    assert claim_next_chunk(sessions, queue, "w/3", "cpu", 60)[:2] == (job, 0)


def test_claims_made_together_take_every_chunk_once_and_charge_each(
        database_url, sessions, tmp_path, tiny_checkpoint, queue):
    jobs = {make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=12, owner=owner,
                     size=3): owner for owner in ("alice", "bob")}
    # each claimer a process's own connections, as workers have
    fleet = db.ready(database_url, DbPool(size=CLAIMERS, overflow=0))
    start, taken, errors = threading.Barrier(CLAIMERS), [], []

    def claimer(index: int) -> None:
        try:
            start.wait()
            while (claimed := claim_next_chunk(fleet, queue, f"w/{index}", "cpu", 60)):
                taken.append(claimed[:2])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert sorted(taken) == sorted((job, chunk) for job in jobs for chunk in range(12))
    with sessions() as session:
        served = dict(session.execute(select(Job.id, Job.served).where(Job.id.in_(jobs))).all())
        tags = dict(session.execute(select(FairShare.owner, FairShare.served)
                                    .where(FairShare.queue == queue)).all())
    # one job per owner: every chunk's 3 requests on its job, none lost to another charge
    assert served == {job: 12 * 3 for job in jobs}
    assert Counter(job for job, _chunk in taken) == {job: 12 for job in jobs}
    assert set(tags) == {CLOCK, "alice", "bob"}
    assert tags[CLOCK] <= min(tags["alice"], tags["bob"])


def test_a_charge_that_fails_leaves_the_claim_standing(sessions, tmp_path, tiny_checkpoint,
                                                       queue, monkeypatch, caplog):
    """The claim has committed when its charge runs: a database error there is logged,
    not raised, so a retried call cannot claim a second chunk while holding the first."""
    from sqlalchemy.exc import OperationalError

    from dinfer_batch.jobs.running import dispatch

    def fails(*_args):
        raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))

    job = make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks=2)
    monkeypatch.setattr(dispatch, "_charge", fails)
    assert claim_next_chunk(sessions, queue, "w/1", "cpu", 60)[:2] == (job, 0)
    assert "left uncharged" in caplog.text
    with sessions() as session:
        assert session.scalar(select(Job.served).where(Job.id == job)) == 0
