"""Fleet-wide work done once per fleet (ADR 057), on SQLite and PostgreSQL: one process
holds the reaper's lease until it expires or is given up, then another takes it over;
reaper threads make passes only while they hold it; an idle worker's heartbeat writes
only when its state changed or a third of the worker timeout has passed; a queue's live
workers are counted by the database."""

import threading
import time

import pytest
from sqlalchemy import select, update

from dinfer_batch.fleet.heartbeat import Heartbeat, refresh_seconds
from dinfer_batch.fleet.reaper import Reaped, Reaper, Tenure
from dinfer_batch.storage import db, leases, registry
from dinfer_batch.storage.registry import WorkerState
from dinfer_batch.storage.tables import Lease, Worker
from tests.service_helpers import wait_for


@pytest.fixture
def sessions(database_url):
    db.upgrade(database_url)
    return db.ready(database_url)


def test_one_holder_at_a_time_and_a_takeover(sessions):
    now = 1000.0
    assert leases.take(sessions, "duty", "a", 30, now=now)
    assert not leases.take(sessions, "duty", "b", 30, now=now + 1)
    assert leases.take(sessions, "duty", "a", 30, now=now + 20)  # renewed to now + 50
    assert not leases.take(sessions, "duty", "b", 30, now=now + 45)
    assert leases.take(sessions, "duty", "b", 30, now=now + 51)  # a died: b takes over
    assert not leases.take(sessions, "duty", "a", 30, now=now + 52)
    assert leases.take(sessions, "other", "a", 30, now=now + 52)  # another duty, its own
    leases.give_up(sessions, "duty", "a")  # not its lease: nothing changes
    assert not leases.take(sessions, "duty", "c", 30, now=now + 53)
    leases.give_up(sessions, "duty", "b")
    assert leases.take(sessions, "duty", "c", 30, now=now + 53)
    with sessions() as session:
        assert dict(session.execute(select(Lease.name, Lease.holder)).all()) == {
            "duty": "c", "other": "a"}


def test_many_asking_at_once_one_holds(sessions):
    took: list[str] = []
    start = threading.Barrier(8)

    def ask(holder: str) -> None:
        start.wait()
        if leases.take(sessions, "duty", holder, 30):
            took.append(holder)

    threads = [threading.Thread(target=ask, args=(f"w{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(took) == 1


class CountingReaper(Reaper):
    def __init__(self, sessions) -> None:
        super().__init__(sessions, broker=None, worker_timeout=60)  # type: ignore[arg-type]
        self.passes = 0

    def run_once(self) -> Reaped:
        self.passes += 1
        return Reaped()


@pytest.mark.integration
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_asking_for_a_held_lease_does_not_wait_on_its_row(sessions, database_url):
    """A thousand heartbeats ask for the lease: while it is held, asking only reads, so
    no asker queues on the row while the holder renews it (its transaction still open)."""
    import psycopg

    assert leases.take(sessions, "duty", "holder", 30)
    renewing = psycopg.connect(database_url.replace("+psycopg", ""))
    try:
        renewing.execute("SELECT 1 FROM leases WHERE name = 'duty' FOR UPDATE")
        answers: list[bool] = []
        asker = threading.Thread(target=lambda: answers.append(
            leases.take(sessions, "duty", "another", 30)), daemon=True)
        asker.start()
        asker.join(timeout=20)
        assert not asker.is_alive(), "the ask waited on the holder's renewal"
        assert answers == [False]
    finally:
        renewing.rollback()
        renewing.close()


def test_only_the_lease_holder_makes_passes_and_another_takes_over(sessions):
    stop_first, stop_rest = threading.Event(), threading.Event()
    first = CountingReaper(sessions)
    threads = [first.start(Tenure("first", 0.1, asks_here=True), stop_first)]
    wait_for(lambda: first.passes >= 1, 10)
    rest = [CountingReaper(sessions) for _ in range(3)]
    threads += [reaper.start(Tenure(f"rest{index}", 0.1, asks_here=True), stop_rest)
                for index, reaper in enumerate(rest)]
    time.sleep(1.0)
    assert first.passes >= 5 and sum(r.passes for r in rest) == 0
    stop_first.set()  # a clean stop gives the lease up: one of the rest takes it over
    wait_for(lambda: sum(r.passes for r in rest) >= 3, 10)
    assert sum(1 for r in rest if r.passes) == 1
    stop_rest.set()
    for thread in threads:  # done before the database goes
        thread.join(10)


def test_a_workers_heartbeat_asks_for_the_lease_in_its_own_transaction(sessions):
    """A worker's reaper thread never asks: its heartbeat does, in its write; once it
    holds the lease the thread renews it and makes passes, and a renewal refused (another
    holder took the expired lease) stops them."""
    register(sessions)
    tenure = Tenure("w/1", 0.1)
    reaper, stop = CountingReaper(sessions), threading.Event()
    thread = reaper.start(tenure, stop)
    assert leases.take(sessions, leases.REAPER, "other", 30)
    heartbeat = Heartbeat(sessions, "w/1", WorkerState(), 5, 60, also=tenure.ask_in)
    assert heartbeat.beat() and not tenure.held.is_set()
    time.sleep(0.5)
    assert reaper.passes == 0
    leases.give_up(sessions, leases.REAPER, "other")
    heartbeat._written_at -= 20
    assert heartbeat.beat() and tenure.held.is_set()
    wait_for(lambda: reaper.passes >= 2, 10)
    with sessions.begin() as session:  # the lease expired and another process took it
        session.execute(update(Lease).values(holder="other", expires_at=time.time() + 30))
    wait_for(lambda: not tenure.held.is_set(), 10)
    passes = reaper.passes
    time.sleep(0.5)
    assert reaper.passes == passes
    stop.set()
    thread.join(10)


def register(sessions, worker_id="w/1"):
    registry.register(sessions, worker_id, "w", "tiny", "cpu", ["q"])


def heartbeat_at(sessions, worker_id="w/1"):
    with sessions() as session:
        return session.scalar(select(Worker.heartbeat_at).where(Worker.id == worker_id))


def test_an_idle_heartbeat_writes_a_third_of_the_timeout_apart(sessions):
    assert refresh_seconds(5, 60) == 20 and refresh_seconds(1, 2) == 1
    register(sessions)
    state = WorkerState()
    heartbeat = Heartbeat(sessions, "w/1", state, interval=5, worker_timeout=60)
    heartbeat._written = state.shown()
    assert not heartbeat.beat()  # nothing changed, registered just now
    state.job_id, state.chunk_id = "j", 3
    assert heartbeat.beat()  # a chunk started
    assert not heartbeat.beat()
    heartbeat._written_at -= 20  # a third of the timeout later
    with sessions.begin() as session:
        session.execute(update(Worker).values(heartbeat_at=0.0))
    assert heartbeat.beat() and heartbeat_at(sessions) > time.time() - 5
    heartbeat.stop()
    assert registry.recent_workers(sessions)[0].stopped_at is not None


def test_live_workers_of_a_queue_are_counted_by_the_database(sessions):
    for worker_id, queues in (("a", ["q_1", "other"]), ("b", ["q_1"]), ("c", ["qx1"]),
                              ("d", ["q%1", "q_10"]), ("e", ["q_1"])):
        registry.register(sessions, worker_id, worker_id, "tiny", "cpu", queues)
    with sessions.begin() as session:
        session.execute(update(Worker).where(Worker.id == "e").values(heartbeat_at=0.0))
    with sessions() as session:
        counts = {queue: registry.live_count_on_queue(session, queue, 60)
                  for queue in ("q_1", "q%1", "other", "none")}
    assert counts == {"q_1": 2, "q%1": 1, "other": 1, "none": 0}  # q_1: not qx1, q%1, q_10
