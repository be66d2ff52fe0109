"""Dispatch on a real database (SQLite, then PostgreSQL), without workers: the order in
which free workers get chunks (priority strictly first, then fair share across owners and
their jobs), a job's place in its queue, and the fair-share bookkeeping itself."""

import random
import uuid
from collections import Counter

import pytest

from dinfer_batch.jobs.fair_share import Level, OwnerLoad, OwnerTag, Waiting, chunks_before
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.reading.place import place, places
from dinfer_batch.jobs.running.chunk_state import ChunkMetrics, finish
from dinfer_batch.jobs.running.dispatch import claim_next_chunk
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.statuses import ChunkStatus
from dinfer_batch.storage import db
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_settings, write_jsonl


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def make_job(sessions, tmp_path, model, queue, chunks, owner="local", priority=0, size=2):
    path = write_jsonl(tmp_path / f"{uuid.uuid4().hex}.jsonl",
                       [{"prompt": f"p{i}"} for i in range(size * chunks)])
    spec = JobSpec(model=load_model_info(str(model), MODELS_DIR), queue=queue, chunk_size=size,
                   owner=owner, priority=priority)
    return ingest(sessions, path, spec, env_settings()).id


def drain(sessions, queue, count=None):
    """Claim and finish chunks one at a time, as one worker would: the job ids in order."""
    order = []
    while count is None or len(order) < count:
        claimed = claim_next_chunk(sessions, queue, "w/1", "cpu", 60)
        if claimed is None:
            break
        job_id, chunk_id, _items = claimed
        finish(sessions, job_id, chunk_id, ChunkStatus.DONE, ChunkMetrics())
        order.append(job_id)
    return order


def test_higher_priority_first_then_owners_alternate(sessions, tmp_path, tiny_checkpoint,
                                                     queue):
    big = make_job(sessions, tmp_path, tiny_checkpoint, queue, 6, owner="alice")
    second = make_job(sessions, tmp_path, tiny_checkpoint, queue, 2, owner="alice")
    bob = make_job(sessions, tmp_path, tiny_checkpoint, queue, 4, owner="bob")
    low = make_job(sessions, tmp_path, tiny_checkpoint, queue, 1, owner="bob", priority=-1)
    urgent = make_job(sessions, tmp_path, tiny_checkpoint, queue, 2, owner="carol",
                      priority=1)
    order = drain(sessions, queue)
    assert order[:2] == [urgent, urgent]  # submitted last, served strictly first
    assert order[-1] == low
    normal = order[2:-1]
    # owners alternate while both wait; alice's turns alternate between her two jobs
    assert normal[:8] == [big, bob, second, bob, big, bob, second, bob]
    assert normal[8:] == [big] * 4
    assert Counter(order) == {big: 6, second: 2, bob: 4, low: 1, urgent: 2}


def test_a_new_owner_gets_its_turn_at_once_but_no_credit(sessions, tmp_path, tiny_checkpoint,
                                                         queue):
    alice = make_job(sessions, tmp_path, tiny_checkpoint, queue, 10, owner="alice")
    assert drain(sessions, queue, 5) == [alice] * 5  # alone: every chunk
    bob = make_job(sessions, tmp_path, tiny_checkpoint, queue, 10, owner="bob")
    # bob had no work before: he is served next, then they alternate (no burst of five)
    assert drain(sessions, queue, 6) == [bob, alice] * 3


def test_place_counts_the_chunks_dispatched_first(sessions, tmp_path, tiny_checkpoint, queue):
    from dinfer_batch.jobs.expiry import get_job

    alice = make_job(sessions, tmp_path, tiny_checkpoint, queue, 3, owner="alice")
    bob = make_job(sessions, tmp_path, tiny_checkpoint, queue, 3, owner="bob")
    high = make_job(sessions, tmp_path, tiny_checkpoint, queue, 2, owner="bob", priority=1)
    assert place(sessions, get_job(sessions, high)) == 0
    assert place(sessions, get_job(sessions, alice)) == 2  # the high job's two chunks
    assert place(sessions, get_job(sessions, bob)) == 3  # ... and alice's turn (by name)
    claimed = claim_next_chunk(sessions, queue, "w/1", "cpu", 60)
    assert claimed is not None and claimed[0] == high
    assert place(sessions, get_job(sessions, high)) == "running"
    assert place(sessions, get_job(sessions, bob)) == 2


def test_fair_share_is_by_requests_whatever_the_chunk_sizes():
    """One owner's chunks hold 4 requests, the other's 1: the second gets four chunks per
    chunk of the first, so both get the same number of requests dispatched."""
    level = Level(0.0, {}, [Waiting("a", "alice", 1.0, 0.0, 4, 100),
                            Waiting("b", "bob", 2.0, 0.0, 1, 100)])
    served = Counter()
    for _ in range(50):
        job = level.pick()
        level.charge(job, job.chunk_size)
        served[job.owner] += job.chunk_size
    assert abs(served["alice"] - served["bob"]) <= 4
    idle = Level(10.0, {"carol": OwnerTag(served=2.0)}, [Waiting("c", "carol", 3.0, 0.0, 1)])
    job = idle.pick()
    idle.charge(job, 1)
    assert idle.owners["carol"].served == 11.0  # started from the clock, not its old 2.0


def simulated_ahead(level, job_id):
    """The reference for `chunks_before`: dispatch the level's chunks one by one (on a
    copy) until the job's turn comes."""
    copy = Level(level.clock, {o: OwnerTag(t.served, t.job_clock)
                               for o, t in level.owners.items()},
                 [Waiting(**vars(job)) for job in level.jobs])
    ahead = 0
    while True:
        job = copy.pick()
        if job.job_id == job_id:
            return ahead
        copy.charge(job, job.chunk_size)
        ahead += 1
        job.queued -= 1
        if job.queued <= 0:
            copy.jobs.remove(job)


def closed_form(level, job_id):
    owner = next(job.owner for job in level.jobs if job.job_id == job_id)
    loads = Counter(), Counter()
    for job in level.jobs:
        loads[0][job.owner] += job.queued
        loads[1][job.owner] += job.queued * job.chunk_size
    others = {name: OwnerLoad(loads[0][name], loads[1][name]) for name in loads[0]}
    mine = Level(level.clock, level.owners, [j for j in level.jobs if j.owner == owner])
    return chunks_before(mine, job_id, others)


def test_the_closed_form_place_is_the_dispatch_order():
    """Random levels (owners with served times around the clock, jobs of their own
    sizes, some at the same start): the closed form counts exactly the chunks that a
    step-by-step dispatch serves first, for every waiting job."""
    rng = random.Random(26)
    for _ in range(300):
        clock = float(rng.randrange(0, 40))
        owners, jobs = {}, []
        for o in range(rng.randrange(1, 5)):
            name = f"owner{o}"
            owners[name] = OwnerTag(float(rng.randrange(0, 60)), float(rng.randrange(0, 30)))
            size = rng.choice((1, 2, 4, 256))
            for j in range(rng.randrange(1, 4)):
                jobs.append(Waiting(f"{name}-job{j}", name, float(rng.randrange(0, 3)),
                                    float(rng.randrange(0, 40)), size,
                                    rng.randrange(1, 8)))
        level = Level(clock, owners, jobs)
        for job in jobs:
            assert closed_form(level, job.job_id) == simulated_ahead(level, job.job_id), \
                (level, job.job_id)


def test_the_closed_form_is_exact_for_one_owners_jobs_of_any_sizes():
    level = Level(3.0, {"alice": OwnerTag(1.0, 5.0)},
                  [Waiting("big", "alice", 1.0, 0.0, 256, 3),
                   Waiting("small", "alice", 2.0, 9.0, 1, 600),
                   Waiting("mid", "alice", 3.0, 40.0, 16, 20)])
    for job in level.jobs:
        assert closed_form(level, job.job_id) == simulated_ahead(level, job.job_id)


def test_places_of_a_page_are_the_places_of_each_job(sessions, tmp_path, tiny_checkpoint,
                                                     queue):
    from dinfer_batch.jobs.expiry import get_job

    made = [make_job(sessions, tmp_path, tiny_checkpoint, queue, chunks, owner=owner,
                     priority=priority)
            for chunks, owner, priority in ((3, "alice", 0), (2, "bob", 0), (1, "alice", 1),
                                            (4, "carol", -1), (2, "alice", 0))]
    claim_next_chunk(sessions, queue, "w/1", "cpu", 60)  # the high job's chunk runs
    jobs = [get_job(sessions, job_id) for job_id in made]
    together = places(sessions, jobs)
    assert together == {job.id: place(sessions, job) for job in jobs}
    assert together[made[2]] == "running"
    order = drain(sessions, queue)
    for job in jobs[:2] + jobs[3:]:  # the place is the count of chunks served first
        assert order.index(job.id) == together[job.id]
