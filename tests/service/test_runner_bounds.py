"""A chunk's engine work is bounded (jobs/running/runner.py), with the real engine on a JSON
model and SQLite: a constraint that cannot compile fails its own lines, compiled once
across batches, chunks and splits in halves; a line whose constraint is known to fail
never reaches an engine call; past the chunk's deadline the remaining lines fail with
an error naming it, and the worker goes on."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from sqlalchemy import select

from dinfer_batch.config import Settings
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.running.runner import ChunkRunner
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item
from dinfer_engine import Engine
from dinfer_models import MODELS_DIR
from tests.json_models import write_json_model
from tests.service_helpers import env_settings, write_jsonl

BAD = {"regex": "[ZY][cd]*c[cd]{6}"}  # 'Z', 'Y': not in the JSON model's vocabulary
GOOD = {"regex": "[a-f]{2}"}


@dataclass
class CountingEngine:
    """The real engine, counting its calls; a prompt with POISON makes a call raise when
    its result lands (after the call's constraints compiled)."""

    engine: Engine
    calls: list[list[str]] = field(default_factory=list)

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(self, requests, config=None, on_result=None):
        prompts = [r.prompt for r in requests]
        self.calls.append(prompts)

        def poisoned(index, result):
            if "POISON" in prompts[index]:
                raise RuntimeError("the engine cannot digest this prompt")
            on_result(index, result)

        return self.engine.generate(requests, config, poisoned)

    def constraint_error(self, spec):
        return self.engine.constraint_error(spec)


@pytest.fixture(scope="module")
def json_model(tmp_path_factory: pytest.TempPathFactory):
    return write_json_model(tmp_path_factory.mktemp("json") / "llada")


@pytest.fixture
def setup(tmp_path, json_model):
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    db.upgrade(url)
    sessions = db.ready(url)
    model = load_model_info(str(json_model), MODELS_DIR)
    engine = CountingEngine(Engine.from_pretrained(json_model))
    submitted = []

    def submit(lines, chunk_size=100):
        spec = JobSpec(model=model, queue="q", chunk_size=chunk_size,
                       params={"max_tokens": 8, "block_length": 8, "steps": 8})
        path = write_jsonl(tmp_path / f"in{len(submitted)}.jsonl", lines)
        submitted.append(ingest(sessions, path, spec, env_settings()))
        return submitted[-1]

    return sessions, engine, submit


def items(sessions, job_id):
    with sessions() as session:
        return session.scalars(select(Item).where(Item.job_id == job_id)
                               .order_by(Item.line)).all()


def _runner(sessions: Any, engine: CountingEngine, **settings: Any) -> ChunkRunner:
    """A runner of `engine` on the test environment's settings, with these changed."""
    config = replace(Settings.from_env(os.environ), **settings)
    return ChunkRunner(sessions, device="cpu", worker="test", batch_items=100, config=config,
                       engines=lambda *_: engine)


def test_a_compile_failure_fails_its_lines_once_and_splits_never_recompile(setup):
    sessions, engine, submit = setup
    lines = [{"prompt": f"p{i}", "structured_outputs": GOOD} for i in range(8)]
    for i in (1, 4, 6):
        lines[i]["structured_outputs"] = BAD
    lines[5]["prompt"] = "POISON"  # a failure that is split in halves
    job = submit(lines)
    run = _runner(sessions, engine)
    assert run(job.id, 0) == "done"
    result = items(sessions, job.id)
    failed = {i.line: (i.error_code, i.error_message) for i in result if i.status == "failed"}
    assert set(failed) == {2, 5, 6, 7}
    for line in (2, 5, 7):
        assert failed[line][0] == "invalid_request"
        assert failed[line][1].startswith("structured output: the model's vocabulary cannot "
                                          "spell")
    assert failed[6][0] == "engine_error"
    assert all(len(i.output_text) <= 2 for i in result if i.status == "completed")
    assert engine.engine.constraints.compiles == 2  # BAD once, GOOD once
    # the bad lines never reached an engine call (compiled ahead of it); the poison was
    # split out of the others
    assert engine.calls[0] == ["p0", "p2", "p3", "POISON", "p7"]
    assert all(not {"p1", "p4", "p6"} & set(call) for call in engine.calls)
    assert ["POISON"] in engine.calls

    # a later batch's chunks: the known failure never reaches an engine call
    calls = len(engine.calls)
    later = submit([{"prompt": f"q{i}", "structured_outputs": BAD if i % 2 else GOOD}
                    for i in range(6)], chunk_size=3)
    for chunk in (0, 1):
        assert run(later.id, chunk) == "done"
    assert engine.engine.constraints.compiles == 2
    assert engine.calls[calls:] == [["q0", "q2"], ["q4"]]
    assert [i.error_code for i in items(sessions, later.id)] == [
        None, "invalid_request"] * 3


def test_past_the_chunk_deadline_the_remaining_lines_fail_naming_it(setup):
    sessions, engine, submit = setup
    lines = [{"prompt": f"p{i}", "max_tokens": 8 * (1 + i % 2)} for i in range(6)]
    job = submit(lines)
    run = _runner(sessions, engine, chunk_deadline=0.000_1)
    # two engine batches (max_tokens differ): the first runs to its first result only
    assert run(job.id, 0) == "done"
    result = items(sessions, job.id)
    done = [i for i in result if i.status == "completed"]
    late = [i for i in result if i.status == "failed"]
    assert len(done) <= 1 and len(late) >= 5 and len(engine.calls) <= 1
    for item in late:
        assert item.error_code == "deadline_exceeded"
        assert "deadline of 0.0001 s (DINFER_BATCH_CHUNK_DEADLINE)" in item.error_message
    # the next chunk gets its own deadline: the worker goes on
    again = submit([{"prompt": "fine"}])
    run.config = replace(run.config, chunk_deadline=600)
    assert run(again.id, 0) == "done"
    assert [i.status for i in items(sessions, again.id)] == ["completed"]


def test_the_deadline_also_bounds_compiles_ahead_of_the_engine_call(setup):
    sessions, engine, submit = setup
    lines = [{"prompt": f"p{i}", "structured_outputs": {"regex": f"[ab]*a[ab]{{{i + 4}}}Z"}}
             for i in range(6)]  # six distinct constraints, none of which can compile
    job = submit(lines)
    run = _runner(sessions, engine, chunk_deadline=0.000_1)
    assert run(job.id, 0) == "done"
    assert engine.engine.constraints.compiles <= 1 and engine.calls == []
    assert {i.error_code for i in items(sessions, job.id)} == {"deadline_exceeded"}
