"""Constraint work is bounded in the running service (docs/structured-outputs.md,
docs/adr/024-bounded-constraint-work.md), with real workers, Redis, the API server and
the official client, on SQLite and PostgreSQL: a constraint that cannot compile is
compiled once per worker across lines, chunks and batches; past a chunk's deadline its
remaining lines fail naming it and the worker goes on; a batch of many distinct schemas
is checked at submit (each grammar validated in milliseconds) while another owner's
requests go on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Item
from tests.api.test_api_quotas import create
from tests.api.test_api_tenants import upload
from tests.api_helpers import start_api, stop_api
from tests.json_models import write_json_model
from tests.service_fixtures import _service
from tests.service_helpers import Service, write_jsonl

pytestmark = pytest.mark.integration

BAD = {"regex": "[QR][01]*1[01]{9}"}  # 'Q', 'R' cannot be spelled
GOOD = {"regex": "[0-9]{2}"}


@pytest.fixture
def json_service(database_url: str, tmp_path: Path) -> Iterator[Service]:
    yield from _service(database_url, write_json_model(tmp_path / "json_model"))


def submit(service: Service, path: Path, *args: str) -> str:
    result = service.cli("submit", path, *args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def job_items(service: Service, job_id: str) -> list[Item]:
    with service.sessions()() as session:
        return list(session.scalars(select(Item).where(Item.job_id == job_id)
                                    .order_by(Item.line)))


def test_a_constraint_that_cannot_compile_is_compiled_once_per_worker(json_service, tmp_path):
    service, log = json_service, tmp_path / "worker.log"
    service.start_worker(log)
    jobs = []
    for batch in range(2):
        lines = [{"prompt": f"b{batch} {i}", "structured_outputs": BAD if i % 3 else GOOD,
                  "max_tokens": 8, "block_length": 8} for i in range(9)]
        jobs.append(submit(service, write_jsonl(tmp_path / f"in{batch}.jsonl", lines),
                           "--chunk-size", "4"))
    for job_id in jobs:
        job = service.wait_job(job_id, lambda j: j.status in ENDED, 240)
        assert (job.status, job.completed_count, job.failed_count) == ("completed", 3, 6)
        for item in job_items(service, job_id):
            if (item.line - 1) % 3:
                assert item.error_code == "invalid_request"
                assert "structured output: the model's vocabulary cannot spell" in \
                    item.error_message
            else:
                assert item.status == "completed" and len(item.output_text) <= 2
    text = log.read_text()
    # 12 lines in 6 chunks of 2 batches asked for it: one compile, remembered
    assert text.count("cannot be compiled, remembered") == 1
    assert text.count("compiled constraint ") == 1  # GOOD, once as well


def test_past_a_chunks_deadline_its_remaining_lines_fail_and_the_worker_goes_on(service,
                                                                                tmp_path):
    service.start_worker(tmp_path / "worker.log",
                         DINFER_BATCH_ENGINE="tests.paced_engine:PacedEngine",
                         DINFER_TEST_ITEM_SECONDS="0.5", DINFER_BATCH_CHUNK_DEADLINE="1.2")
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(8)]
    first = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "8")
    job = service.wait_job(first, lambda j: j.status in ENDED, 120)
    items = job_items(service, first)
    done = [i for i in items if i.status == "completed"]
    late = [i for i in items if i.status == "failed"]
    assert job.status == "completed" and 1 <= len(done) <= 4 and len(late) >= 4
    assert [i.line for i in done] == list(range(1, len(done) + 1))  # in order, then none
    for item in late:
        assert item.error_code == "deadline_exceeded"
        assert "deadline of 1.2 s (DINFER_BATCH_CHUNK_DEADLINE)" in item.error_message
    # the same worker runs the next chunk, with a deadline of its own
    second = submit(service, write_jsonl(tmp_path / "one.jsonl", lines[:1]))
    assert service.wait_job(second, lambda j: j.status in ENDED, 120).completed_count == 1


def optional_properties(title: str) -> dict:
    """A schema whose expansion into wave 4's regular expression was past its limit (64
    optional properties); a small grammar. Made distinct by its title."""
    return {"title": title, "type": "object", "properties": {
        f"p{i}": {"type": "string"} for i in range(64)}}


def test_many_distinct_schemas_are_checked_while_others_go_on(service, tmp_path):
    api = start_api(service, tmp_path)
    try:
        alice, bob = api.client("alice"), api.client("bob")
        schemas = [{"response_format": {"type": "json_schema", "json_schema": {
            "name": "s", "schema": optional_properties(f"s{i}")}}} for i in range(300)]
        schemas[7] = {"response_format": {"type": "json_schema", "json_schema": {
            "name": "s", "schema": {"type": "string", "pattern": "a(?=b)"}}}}
        attack = upload(alice, tmp_path / "attack.jsonl", schemas)
        honest = upload(bob, tmp_path / "honest.jsonl", [{}, {}], "b")
        idle = _timed(lambda: bob.batches.list(limit=5))
        seconds: list[float] = []
        created = []
        attacker = threading.Thread(target=lambda: created.append(create(alice, attack)))
        attacker.start()
        while attacker.is_alive() or not seconds:
            seconds.append(_timed(lambda: bob.batches.list(limit=5)))
        attacker.join()
        theirs = create(bob, honest)
        [batch] = created
        # every grammar was validated at submit: the one llguidance refuses failed there
        assert (batch.request_counts.total, batch.request_counts.failed) == (300, 1)
        assert batch.status == "in_progress" and theirs.status == "in_progress"
        assert max(seconds) < 2 * idle + 2, (idle, seconds)
    finally:
        stop_api(api)


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
