"""completion_window: a job past its window reads as `expired` at once, without the read
writing anything; the reaper's pass (every worker, `beat`), a worker between engine
batches or a change of the job writes it, with the same figures and lines. Unfinished
requests fail with `batch_expired`, finished ones stay in the output; retry opens a fresh
window."""

import time

import pytest
from sqlalchemy import func, select, update

from dinfer_batch.errors import UserError
from dinfer_batch.fleet.reaper import Reaper
from dinfer_batch.jobs.create import make_spec
from dinfer_batch.jobs.expiry import get_job, window_seconds
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.lifecycle import list_jobs, retry_job
from dinfer_batch.jobs.reading.results import outputs
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.jobs.running.chunk_state import Outcome
from dinfer_batch.jobs.spec import JobOptions
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item, Job
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_broker, env_settings, write_jsonl


@pytest.mark.parametrize(("window", "seconds"), [("24h", 86400), ("90m", 5400), ("10s", 10),
                                                 ("2d", 172800)])
def test_windows(window, seconds):
    assert window_seconds(window) == seconds


@pytest.mark.parametrize("window", ["24", "h", "0h", "1w", "-1h", "1.5h", 24])
def test_bad_windows_are_refused(window):
    with pytest.raises(UserError, match="completion_window must look like 24h"):
        window_seconds(window)


def test_expiry_keeps_finished_results_and_fails_the_rest(database_url, tiny_checkpoint,
                                                          tmp_path):
    db.upgrade(database_url)
    sessions = db.ready(database_url)
    spec = make_spec(str(tiny_checkpoint), {"max_tokens": 8, "block_length": 8},
                     JobOptions(queue="q", chunk_size=2, completion_window="1h"), MODELS_DIR)
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"add {i} 1="} for i in range(4)])
    job = ingest(sessions, path, spec, env_settings())
    assert job.expires_at == pytest.approx(job.created_at + 3600, abs=5)
    chunk_state.claim(sessions, job.id, 0, "w", "cpu", 60)
    chunk_state.record(sessions, job.id, [Outcome(line=1, text="2", finish_reason="stop",
                                                  prompt_tokens=7, completion_tokens=1)])
    assert get_job(sessions, job.id).status == "in_progress"  # inside its window

    with sessions.begin() as session:
        session.execute(update(Job).where(Job.id == job.id)
                        .values(expires_at=time.time() - 1))
    read = []
    for _ in ("before the reaper's pass", "after it"):
        [listed] = list_jobs(sessions, None, 10)
        assert listed.status == "expired"
        assert [j.id for j in list_jobs(sessions, "expired", 10)] == [job.id]
        assert list_jobs(sessions, "in_progress", 10) == []
        job = get_job(sessions, job.id)
        assert (job.completed_count, job.failed_count) == (1, 3)
        assert job.expired_at == job.expires_at
        lines = list(outputs(sessions, job))
        assert lines[0]["response"]["body"]["choices"][0]["text"] == "2"
        assert [line["error"]["code"] for line in lines[1:]] == ["batch_expired"] * 3
        read.append(lines)
        if len(read) == 1:  # the reads wrote nothing: the reaper's pass writes it
            with sessions() as session:
                assert session.get(Job, job.id).status == "in_progress"
                assert session.scalar(select(func.count()).where(
                    Item.job_id == job.id, Item.status == "pending")) == 3
            with env_broker() as broker:
                assert Reaper(sessions, broker, env_settings().worker_timeout
                              ).run_once().expired == 1
                assert Reaper(sessions, broker, env_settings().worker_timeout
                              ).run_once().expired == 0
    assert read[0] == read[1]
    with sessions() as session:
        assert session.get(Job, job.id).status == "expired"
    # a late result of the running chunk is not written over the expiry
    assert chunk_state.record(sessions, job.id, [Outcome(line=2, text="x")]) == 0

    assert set(retry_job(sessions, job.id, env_settings())) == {0, 1}
    job = get_job(sessions, job.id)
    assert job.status == "in_progress" and job.expires_at > time.time() + 3000
