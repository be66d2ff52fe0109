"""The chunk runner with a recording stand-in engine: grouping into engine batches,
idempotent re-runs, one bad prompt failing alone, worn-out items."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from dinfer_batch.config import Settings
from dinfer_batch.formats.parameters.params import PER_REQUEST, row_controls
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.running.chunk_state import MAX_ATTEMPTS
from dinfer_batch.jobs.running.runner import ChunkRunner
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Chunk, Item, Job
from dinfer_engine import GenerationResult
from dinfer_engine.loading.tokenizer import load_tokenizer
from dinfer_engine.sampling_controls import SamplingControls
from dinfer_models import MODELS_DIR
from tests.service_helpers import env_settings, write_jsonl


@dataclass
class RecordingEngine:
    tokenizer: Any
    calls: list[dict[str, Any]] = field(default_factory=list)

    def generate(self, requests, config, on_result):
        prompts = [r.prompt for r in requests]
        self.calls.append({"prompts": prompts, "gen_length": config.gen_length,
                           "seeds": [r.seed for r in requests],
                           "salts": [r.scope.salt for r in requests],
                           "controls": [r.controls for r in requests],
                           "fields": [dict(r.fields) for r in requests]})
        if any("BAD" in p for p in prompts):
            raise ValueError("prompt 0: unusable")
        for index, prompt in enumerate(prompts):
            on_result(index, GenerationResult(text=f"{prompt}!stop here", token_ids=[5],
                                              finish_reason="length", prompt_tokens=3,
                                              completion_tokens=1, nfe=2, seconds=0.1))

    def constraint_error(self, spec):
        return None


@pytest.fixture
def setup(tmp_path, tiny_checkpoint, monkeypatch):
    return runner_setup(f"sqlite:///{tmp_path / 'runner.db'}", tmp_path, tiny_checkpoint,
                        monkeypatch)


def runner_setup(url, tmp_path, tiny_checkpoint, monkeypatch):
    """Sessions, the recording engine, submit(lines) -> job, and a ChunkRunner."""
    db.upgrade(url)
    sessions = db.ready(url)
    model = load_model_info(str(tiny_checkpoint), MODELS_DIR)
    engine = RecordingEngine(load_tokenizer(tiny_checkpoint))

    def submit(lines):
        spec = JobSpec(model=model, queue="q", chunk_size=100,
                       params={"max_tokens": 8, "block_length": 8})
        return ingest(sessions, write_jsonl(tmp_path / "in.jsonl", lines), spec, env_settings())

    run = ChunkRunner(sessions, device="cpu", worker="test", batch_items=100,
                      config=Settings.from_env(os.environ), engines=lambda *_: engine)
    return sessions, engine, submit, run


def items(sessions, job_id):
    with sessions() as session:
        return session.scalars(select(Item).where(Item.job_id == job_id)
                               .order_by(Item.line)).all()


def test_items_share_a_batch_unless_their_engine_parameters_differ(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a", "seed": 1}, {"prompt": "b", "stop": "!"},
                  {"prompt": "c", "max_tokens": 16}, {"prompt": "d"}])
    run(job.id, 0)
    assert [(c["prompts"], c["gen_length"], c["seeds"]) for c in engine.calls] == [
        (["a", "b", "d"], 8, [1, 256, 512]), (["c"], 16, [384])]  # unseeded: 0 + line * 128
    texts = [(i.output_text, i.finish_reason) for i in items(sessions, job.id)]
    assert texts[1] == ("b", "stop") and texts[0] == ("a!stop here", "length")


def test_per_row_values_ride_on_each_request_of_one_call(setup):
    """seed, n, stop, cache_salt (and the sampling controls, the field table's per-row
    rows) differ per line without splitting the engine call."""
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a", "seed": 1, "cache_salt": "s1"}, {"prompt": "b", "n": 2},
                  {"prompt": "c", "cache_salt": "s2", "stop": ["x"], "logprobs": True,
                   "top_logprobs": 2}])
    run(job.id, 0)
    [call] = engine.calls
    assert (call["prompts"], call["seeds"], call["salts"]) == (
        ["a", "b", "b", "c"], [1, 256, 257, 384], ["s1", "", "", "s2"])
    assert call["controls"] == [None] * 4  # none set: the engine's config's
    assert call["fields"] == [{}, {}, {}, {"logprobs": True, "top_logprobs": 2}]
    assert {"seed", "n", "stop", "cache_salt", "structured", "logprobs"} <= PER_REQUEST


def test_a_lines_sampling_controls_are_its_own():
    assert row_controls({"max_tokens": 8, "seed": 3}) is None
    assert row_controls({"min_p": 0.1, "ignore_eos": True, "max_tokens": 8}) == \
        SamplingControls(min_p=0.1, ignore_eos=True)


def test_a_rerun_chunk_writes_nothing_twice(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a"}, {"prompt": "b"}])
    run(job.id, 0)
    with sessions.begin() as session:  # as if the message were delivered again
        session.execute(update(Chunk).values(status="running"))
        session.execute(update(Job).values(status="in_progress"))
    run(job.id, 0)
    assert len(engine.calls) == 1
    with sessions() as session:
        job = session.get(Job, job.id)
    assert (job.completed_count, job.completion_tokens, job.status) == (2, 2, "completed")


def test_the_chunk_that_ends_a_job_measures_its_result_files_off_the_engines_thread(setup):
    sessions, _, submit, run = setup
    job = submit([{"prompt": "a"}, {"prompt": "BAD"}])
    run(job.id, 0)
    run.writes.submit(lambda: None).result()  # the writer thread's work before it is done
    with sessions() as session:
        ended = session.get(Job, job.id)
    assert ended.status == "completed"
    assert ended.output_bytes > 0 and ended.error_bytes > 0


def test_one_bad_prompt_fails_alone(setup):
    sessions, _, submit, run = setup
    job = submit([{"prompt": "a"}, {"prompt": "BAD"}, {"prompt": "c"}])
    run(job.id, 0)
    statuses = [(i.status, i.error_message) for i in items(sessions, job.id)]
    assert statuses == [("completed", None), ("failed", "prompt 0: unusable"),
                        ("completed", None)]


def test_items_that_outlived_their_workers_fail(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a"}])
    with sessions.begin() as session:
        session.execute(update(Item).values(attempts=MAX_ATTEMPTS))
    run(job.id, 0)
    [item] = items(sessions, job.id)
    assert (item.status, item.error_code) == ("failed", "worker_lost")
    assert engine.calls == []


def test_a_model_that_cannot_load_fails_the_job_once_and_its_items_point_to_it(setup,
                                                                              monkeypatch):
    sessions, _, submit, run = setup
    job = submit([{"prompt": "a"}, {"prompt": "b", "max_tokens": 16}])

    def broken(*_):
        raise RuntimeError(f"CUDA out of memory loading {Path.home()}/cache/weights.bin")

    run.engines = broken
    run(job.id, 0)
    name = job.model.rsplit("/", 1)[-1]
    assert [(i.status, i.error_code, i.error_message) for i in items(sessions, job.id)] == [
        ("failed", "model_not_loaded",
         f"not run: the model {name} could not be loaded (the job's error says why)")] * 2
    with sessions() as session:
        ended = session.get(Job, job.id)
        assert session.scalar(select(Chunk.status)) == "done"
    assert ended.status == "failed"
    # the reason once, on the job, without the server's path
    assert ended.error == (f"cannot load the model {name}: "
                           "RuntimeError: CUDA out of memory loading weights.bin")


def test_a_job_that_expires_mid_chunk_stops_at_the_next_engine_batch(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a"}, {"prompt": "b", "max_tokens": 16}])
    with sessions.begin() as session:
        session.execute(update(Job).values(completion_window="1h",
                                           expires_at=Job.created_at + 3600))
    generate = engine.generate

    def then_expire(*args, **kwargs):  # the window closes while the first batch runs
        generate(*args, **kwargs)
        with sessions.begin() as session:
            session.execute(update(Job).values(expires_at=0))

    engine.generate = then_expire
    run(job.id, 0)
    assert len(engine.calls) == 1
    assert [(i.status, i.error_code) for i in items(sessions, job.id)] == [
        ("completed", None), ("failed", "batch_expired")]
    with sessions() as session:
        assert session.get(Job, job.id).status == "expired"
        assert session.scalar(select(Chunk.status)) == "cancelled"
