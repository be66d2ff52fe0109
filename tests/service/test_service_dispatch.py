"""Dispatch with one real worker on the real Redis (SQLite, then PostgreSQL): a small job
behind a big one, a high-priority job submitted last, two owners sharing the worker, and
`status` / `queues` showing where jobs stand. Chunks take a known time (a stand-in engine
that sleeps 0.3 s per engine call, one call per chunk)."""

import json

import pytest
from sqlalchemy import select

from dinfer_batch.jobs.create import create_job, make_spec
from dinfer_batch.jobs.spec import JobOptions
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Chunk
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_broker, env_settings, write_jsonl

pytestmark = pytest.mark.integration

PACED = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
         "STAND_IN_SECONDS_PER_CALL": "0.3"}
CHUNK = 2  # requests per chunk


def submit(service, path, *args):
    result = service.cli("submit", path, "--chunk-size", str(CHUNK), *args)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()  # stderr: a warning when no worker is live yet


def lines(tmp_path, name, chunks):
    return write_jsonl(tmp_path / f"{name}.jsonl",
                       [{"prompt": f"{name} {i}"} for i in range(CHUNK * chunks)])


def chunk_runs(service):
    """(job id, started, finished) of every chunk, in the order the worker started them."""
    with service.sessions()() as session:
        return session.execute(select(Chunk.job_id, Chunk.started_at, Chunk.finished_at)
                               .where(Chunk.started_at.is_not(None))
                               .order_by(Chunk.started_at)).all()


def test_a_small_job_behind_a_big_one_completes_within_a_few_chunks(service, tmp_path):
    service.start_worker(tmp_path / "worker.log", **PACED)
    big = submit(service, lines(tmp_path, "big", 40))
    service.wait_job(big, lambda j: j.completed_count >= 2 * CHUNK)
    small = submit(service, lines(tmp_path, "small", 2))
    job = service.wait_job(small, lambda j: j.status in ENDED, timeout=60)
    assert (job.status, job.completed_count) == ("completed", 2 * CHUNK)
    assert service.job(big).status == "in_progress"  # long before the big one
    # the bound: from the small job's submission to its end, the one worker runs at most
    # three of the big job's chunks (the one in hand, then one between the small job's
    # two chunks, as the owner's two jobs take turns) -- where FIFO ran all 38 left
    runs = chunk_runs(service)
    during = [run for run in runs if run.job_id == big and run.started_at < job.completed_at
              and (run.finished_at is None or run.finished_at > job.created_at)]
    assert len(during) <= 3, during
    service.wait_job(big, lambda j: j.status in ENDED, timeout=120)


def test_a_high_priority_job_submitted_last_finishes_first(sqlite_service, tmp_path):
    service = sqlite_service
    service.start_worker(tmp_path / "worker.log", **PACED)
    first = submit(service, lines(tmp_path, "first", 8))
    second = submit(service, lines(tmp_path, "second", 8))
    service.wait_job(first, lambda j: j.completed_count >= CHUNK)
    # eight paced chunks: still queued or running while the three CLI reads below run,
    # however loaded the machine
    urgent = submit(service, lines(tmp_path, "urgent", 8), "--priority", "high")
    status = json.loads(service.cli("status", urgent, "--json").output)
    assert status["priority"] == "high" and status["place"] in (0, "running")
    # (the places of jobs behind others: tests/service/test_dispatch.py, without a worker's timing)
    assert json.loads(service.cli("status", second, "--json").output)["priority"] == "normal"
    queues = [json.loads(line) for line in service.cli("queues", "--json").output.splitlines()]
    [mine] = [q for q in queues if q["queue"] == service.queue]
    assert mine["live_workers"] == 1 and mine["owners"] == ["local"]
    assert set(mine["jobs"]) == {"high", "normal"}
    ends = {job_id: service.wait_job(job_id, lambda j: j.status in ENDED).completed_at
            for job_id in (urgent, first, second)}
    assert ends[urgent] < min(ends[first], ends[second])
    runs = [run.job_id for run in chunk_runs(service)]
    start = runs.index(urgent)
    assert runs[start:start + 8] == [urgent] * 8  # once submitted, nothing else ran between


def test_two_owners_share_the_worker_evenly_while_both_wait(service, tmp_path):
    model = service.env["DINFER_BATCH_MODEL"]

    def owners_job(owner, chunks):
        options = JobOptions(queue=service.queue, chunk_size=CHUNK, owner=owner)
        spec = make_spec(model, {}, options, MODELS_DIR)
        path = lines(tmp_path, owner, chunks)
        with env_broker() as broker:
            return create_job(service.sessions(), broker, path, spec, env_settings()).id

    service.start_worker(tmp_path / "worker.log", **PACED)
    alice = owners_job("alice", 40)  # first, and twice as big
    service.wait_job(alice, lambda j: j.completed_count >= 3 * CHUNK)
    bob = owners_job("bob", 20)
    job = service.wait_job(bob, lambda j: j.status in ENDED, timeout=120)
    assert job.status == "completed"
    # while both waited (bob's submission to his last chunk's start), each owner got
    # half of the worker's chunks and of its time, within +-10 %
    runs = [run for run in chunk_runs(service) if job.created_at <= run.started_at]
    last = max(i for i, run in enumerate(runs) if run.job_id == bob)
    both = runs[:last + 1]
    share = sum(run.job_id == bob for run in both) / len(both)
    seconds = {owner: sum(r.finished_at - r.started_at for r in both if r.job_id == owner)
               for owner in (alice, bob)}
    time_share = seconds[bob] / (seconds[alice] + seconds[bob])
    assert len(both) >= 38
    assert 0.45 <= share <= 0.55 and 0.45 <= time_share <= 0.55, (share, time_share)
    service.wait_job(alice, lambda j: j.status in ENDED, timeout=120)


def test_priority_on_submit_run_and_schedules(sqlite_service, tmp_path):
    service = sqlite_service
    path = lines(tmp_path, "p", 1)
    assert service.job(submit(service, path, "--priority", "7")).priority == 7
    refused = service.cli("submit", path, "--priority", "urgent")
    assert refused.exit_code == 2
    assert "priority must be low, normal, high or an integer" in refused.output
    ran = service.cli("run", path, "--priority", "low", "--max-tokens", "8",
                      "--block-length", "8")
    assert ran.exit_code == 0, ran.output
    listed = [json.loads(line) for line in service.cli("list", "--json").output.splitlines()]
    assert [job["priority"] for job in listed] == ["low", "7"]
    added = service.cli("schedule", "add", "nightly", "--every", "1d", path, "--priority",
                        "high")
    assert added.exit_code == 0, added.output
    made = service.cli("schedule", "run", "nightly")
    assert made.exit_code == 0, made.output
    assert service.job(made.stdout.strip()).priority == 1
