"""Requests counted at their cost through the official `openai` client, a real server and
a real worker, on SQLite and PostgreSQL: the quota refuses a batch at its true cost (an
infill length search, the editing decoder's post-steps), the batch's chunks hold its
lines by cost, fair share is charged that cost, and each output line's metrics and the
batch's usage show it. Fields the client spells wrong get a 400 that names them."""

import json

import openai
import pytest
from sqlalchemy import select

from dinfer_batch.storage.tables import Chunk, FairShare
from tests.api.test_api_batches import wait_batch
from tests.api.test_api_quotas import key_name
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration

COMMON = {"max_tokens": 8, "block_length": 4, "steps": 8, "decoder": "fixed"}
LINES = [  # (body, its cost)
    ({"prompt": "12+3", "suffix": " 4", "infill_lengths": [1, 2, 3, 4, 5, 6, 7, 8]}, 8),
    ({"prompt": "a b", "decoder": "editing", "max_post_steps": 8, "n": 2}, 6),  # 2 x (1+2)
    ({"prompt": "x = ", "suffix": [" y ", " z"]}, 2),  # two gaps of max_tokens
    ({"prompt": "hello"}, 1),
]


def upload(client, path):
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
             "body": COMMON | body} for i, (body, _) in enumerate(LINES)]
    with write_jsonl(path, rows).open("rb") as handle:
        return client.files.create(file=handle, purpose="batch").id


def create(client, file_id, **extra):
    return client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                 completion_window="24h", extra_body=extra or None)


def test_quota_chunks_fair_share_metrics_and_usage_count_the_cost(api, tmp_path):
    service, client = api.service, api.client()
    total = sum(cost for _, cost in LINES)  # 17 generations in 4 lines
    assert service.cli("keys", "update", key_name(api), "--max-enqueued-requests",
                       str(total - 1)).exit_code == 0
    file_id = upload(client, tmp_path / "in.jsonl")
    with pytest.raises(openai.RateLimitError) as refused:
        create(client, file_id)
    assert (refused.value.body["limit"], refused.value.body["requested"]) == (total - 1, total)

    assert service.cli("keys", "update", key_name(api), "--max-enqueued-requests",
                       str(total)).exit_code == 0
    batch = create(client, file_id, chunk_size=8)
    assert batch.status == "in_progress"
    with service.sessions()() as session:
        chunks = session.execute(select(Chunk.size, Chunk.cost).where(
            Chunk.job_id == batch.id).order_by(Chunk.chunk_id)).all()
    assert [tuple(chunk) for chunk in chunks] == [(1, 8), (2, 8), (1, 1)]

    service.start_worker(tmp_path / "worker.log")
    batch = wait_batch(client, batch.id, timeout=300)
    assert batch.status == "completed", batch
    assert batch.usage.model_extra["cost"] == total
    output = [json.loads(x) for x in client.files.content(batch.output_file_id).text
              .splitlines()]
    metrics = {line["custom_id"]: line["response"]["body"]["metrics"] for line in output}
    assert [metrics[f"c{i}"]["cost"] for i in range(len(LINES))] == [c for _, c in LINES]
    assert metrics["c0"]["nfe"] > metrics["c3"]["nfe"]  # the search decoded 8 rows
    with service.sessions()() as session:  # the one owner's virtual time: what it ran
        served = session.scalar(select(FairShare.served).where(FairShare.owner == "alice"))
    assert served == total


def test_batch_fields_name_the_field_the_value_and_the_bound(sqlite_api, tmp_path):
    client = sqlite_api.client()
    file_id = upload(client, tmp_path / "in.jsonl")
    http = sqlite_api.http()
    cases = [
        ({"chunk_size": True}, "chunk_size", "got True"),
        ({"output_expires_after": {"anchor": "created_at", "seconds": True}},
         "output_expires_after.seconds", "got True"),
        ({"priority": True}, "priority", "got True"),
        ({"max_tokens": True}, None, "max_tokens must be a positive integer, got True"),
        ({"n": False}, None, "n must be a positive integer, got False"),
        ({"completion_window": "8760h"}, None,
         "completion_window must be at most 7d (168h, 604,800s), got '8760h' (31,536,000s)"),
        ({"stop": ["s"] * 10_000}, None, "stop must hold at most 4 sequences"),
    ]
    for fields, param, message in cases:
        body = {"input_file_id": file_id, "endpoint": "/v1/completions",
                "completion_window": "24h"} | fields
        answer = http.post("/v1/batches", json=body)
        assert answer.status_code == 400, (fields, answer.text)
        error = answer.json()["error"]
        assert message in error["message"], (fields, error)
        if param is not None:
            assert error["param"] == param, (fields, error)
    assert client.batches.list().data == []  # nothing was made
