"""One tenant cannot take the fleet from another (docs/adr/017-tenants.md), through the
official `openai` client against a real server, real workers, Redis, SQLite and
PostgreSQL: priority and chunk size are the key's entitlements (403 above them), every
request counts at its cost (n samples, invalid lines, the same upload twice), a line
past a ceiling fails alone naming its field while another owner's batch runs, and a line
that takes its worker down fails alone without taking the rest of its chunk with it."""

import json

import openai
import pytest
from sqlalchemy import select

from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Item
from tests.api.test_api_quotas import create, key_name
from tests.service_helpers import read_jsonl, write_jsonl

pytestmark = pytest.mark.integration

ENGINES = "tests.stand_in_engines:"
SMALL = {"max_tokens": 8, "block_length": 8}


def upload(client, path, bodies, tag="a"):
    write_jsonl(path, [body if isinstance(body, str) else
                       {"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/completions",
                        "body": {"prompt": f"{tag} {i}", **SMALL, **body}}
                       for i, body in enumerate(bodies)])
    with path.open("rb") as handle:
        return client.files.create(file=handle, purpose="batch").id


def test_entitlements_costs_and_ceilings_between_two_owners(api, tmp_path):
    service, alice, bob = api.service, api.client("alice"), api.client("bob")
    one = upload(alice, tmp_path / "one.jsonl", [{}])

    # priority and chunk size are the key's: 403 naming the limit, nothing made
    for extra, param in (({"priority": 1000}, "priority"), ({"priority": "high"}, "priority"),
                         ({"chunk_size": 100_000}, "chunk_size")):
        with pytest.raises(openai.PermissionDeniedError) as denied:
            create(alice, one, **extra)
        assert (denied.value.body["param"], denied.value.body["code"]) == (param,
                                                                          "not_entitled")
    assert alice.batches.list().data == []
    assert service.cli("keys", "update", key_name(api), "--max-priority", "high",
                       "--max-chunk-size", "512", "--max-enqueued-requests", "10"
                       ).exit_code == 0
    listed = service.cli("keys", "list").output
    row = next(line for line in listed.splitlines() if line.startswith(key_name(api)))
    assert row.split()[3:9] == ["10", "default", "high", "512", "default", "default"]

    # every request at its cost: n samples, invalid lines, one upload made twice
    with pytest.raises(openai.RateLimitError) as refused:  # 2 lines x n=8 = 16 > 10
        create(alice, upload(alice, tmp_path / "n.jsonl", [{"n": 8}, {"n": 8}]))
    assert (refused.value.body["requested"], refused.value.body["usage"]) == (16, 0)
    with pytest.raises(openai.RateLimitError) as refused:  # 12 invalid lines were stored
        create(alice, upload(alice, tmp_path / "bad.jsonl", ["{}"] * 12))
    assert refused.value.body["requested"] == 12
    eight = upload(alice, tmp_path / "eight.jsonl", [{}] * 5 + [
        {"prefix_look": 10**12}, {"after_look": 10**9}, {"top_k": 10**6}])
    first = create(alice, eight, priority="high", chunk_size=512)
    with pytest.raises(openai.RateLimitError) as refused:
        create(alice, eight)
    assert (refused.value.body["usage"], refused.value.body["requested"]) == (5, 8)

    # lines past a ceiling failed at submit, naming the field; the rest runs beside bob's
    assert first.request_counts.failed == 3
    theirs = create(bob, upload(bob, tmp_path / "bob.jsonl", [{}] * 4, "b"))
    service.start_worker(tmp_path / "worker.log",
                         DINFER_BATCH_ENGINE=ENGINES + "InstantEngine")
    for client, batch in ((alice, first), (bob, theirs)):
        service.wait_job(batch.id, lambda job: job.status in ENDED, 120)
        assert client.batches.retrieve(batch.id).status == "completed"
    done = alice.batches.retrieve(first.id)
    assert (done.request_counts.completed, done.request_counts.failed) == (5, 3)
    errors = [json.loads(line) for line in
              alice.files.content(done.error_file_id).text.splitlines()]
    messages = [line["error"]["message"] for line in errors]
    assert [m.split(": ", 1)[1].split(" must")[0] for m in messages] == [
        "prefix_look", "after_look", "top_k"]
    assert "got 1,000,000,000,000" in messages[0]


def test_a_line_that_takes_its_worker_down_fails_alone(service, tmp_path):
    lines = [{"prompt": f"add {i} {i}=", "custom_id": f"c{i}"} for i in range(8)]
    lines[3]["prompt"] = "HANG add 3 3="
    worker = service.start_worker(tmp_path / "worker.log",
                                  DINFER_BATCH_ENGINE=ENGINES + "HangingLineEngine",
                                  DINFER_BATCH_CHUNK_TIMEOUT="2")
    submitted = service.cli("submit", write_jsonl(tmp_path / "in.jsonl", lines),
                            "--chunk-size", "8")
    assert submitted.exit_code == 0, submitted.output
    job = service.wait_job(submitted.output.strip(), lambda j: j.status in ENDED, 240)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 7, 1)
    with service.sessions()() as session:
        items = session.scalars(select(Item).order_by(Item.line)).all()
    assert [(i.line, i.error_code) for i in items if i.status == "failed"] == [
        (4, "worker_lost")]
    assert all(i.output_text == "42" for i in items if i.line != 4)
    # one death with the whole chunk, one with the culprit alone; the innocent lines
    # were never in hand at a second
    assert items[3].attempts == 2 and all(i.attempts <= 2 for i in items if i.line != 4)
    assert worker.poll() is None  # the same worker process, recycled by its watchdog
    out = tmp_path / "out.jsonl"
    assert service.cli("results", job.id, "-o", out).exit_code == 0
    assert [line["error"]["code"] if line["error"] else "ok" for line in read_jsonl(out)] == [
        "ok"] * 3 + ["worker_lost"] + ["ok"] * 4
