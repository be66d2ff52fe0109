"""The official `openai` client, unchanged, against a real `dinfer-batch api` server, a
real worker, real Redis, SQLite and PostgreSQL: files and batches end to end, a chat
batch, cancel, expiry, pagination."""

import json
import time

import pytest

from dinfer_batch.statuses import ENDED
from tests.service_helpers import REPO_ROOT_EXAMPLES, wait_for, write_jsonl

pytestmark = pytest.mark.integration

SMALL = {"max_tokens": 8, "block_length": 8}
VOCABULARY = 45  # the tiny checkpoint's (tests/tiny_model.py: its characters and specials)


def wait_batch(client, batch_id, timeout=120):
    wait_for(lambda: client.batches.retrieve(batch_id).status in ENDED, timeout, poll=0.3)
    return client.batches.retrieve(batch_id)


def test_openai_client_runs_the_example_file_like_the_cli(api, tmp_path):
    api.service.start_worker(tmp_path / "worker.log")
    client = api.client()
    example = REPO_ROOT_EXAMPLES / "prompts_openai.jsonl"
    with example.open("rb") as handle:
        uploaded = client.files.create(file=handle, purpose="batch")
    assert (uploaded.purpose, uploaded.bytes) == ("batch", example.stat().st_size)
    assert uploaded.filename == "prompts_openai.jsonl" and uploaded.id.startswith("file-")
    assert client.files.content(uploaded.id).read() == example.read_bytes()

    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions",
                                  completion_window="24h", metadata={"run": "t1"},
                                  extra_body={"chunk_size": 64, "block_length": 8})
    assert (batch.status, batch.endpoint, batch.metadata) == (
        "in_progress", "/v1/completions", {"run": "t1"})
    assert batch.expires_at == batch.created_at + 24 * 3600
    assert "input_file" not in batch.model_extra  # the server's path of the upload
    batch = wait_batch(client, batch.id)
    assert batch.status == "completed" and batch.error_file_id is None
    assert batch.request_counts.completed == batch.request_counts.total == 300
    assert batch.usage.output_tokens > 0

    output = client.files.content(batch.output_file_id).read()
    cli_out = tmp_path / "cli.jsonl"
    assert api.service.cli("results", batch.id, "-o", cli_out).exit_code == 0
    assert output == cli_out.read_bytes()  # the same lines `dinfer-batch results` writes
    lines = [json.loads(line) for line in output.splitlines()]
    assert [x["custom_id"] for x in lines] == [
        json.loads(line)["custom_id"] for line in example.read_text().splitlines()]
    assert all(x["response"]["status_code"] == 200 for x in lines)
    info = client.files.retrieve(batch.output_file_id)
    assert (info.purpose, info.bytes) == ("batch_output", len(output))

    metrics = api.http("admin").get("/metrics").text  # this test's own database
    assert 'dinfer_batch_jobs{status="completed"} 1.0' in metrics
    assert 'dinfer_batch_items_total{outcome="completed"} 300.0' in metrics
    assert f"dinfer_batch_completion_tokens_total {batch.usage.output_tokens}.0" in metrics
    speed = next(line for line in metrics.splitlines()
                 if line.startswith("dinfer_batch_tokens_per_second{"))
    assert float(speed.split()[-1]) > 0
    live = next(line for line in metrics.splitlines()
                if line.startswith("dinfer_batch_live_workers "))
    assert float(live.split()[-1]) >= 1


def test_chat_batch_with_lines_from_a_typical_openai_file(sqlite_api, tmp_path):
    api = sqlite_api
    api.service.start_worker(tmp_path / "worker.log")
    client = api.client()
    body = {"model": "gpt-4o-mini", "max_completion_tokens": 8, "temperature": 0.8,
            "top_p": 0.9, "top_k": 20, "seed": 7, "frequency_penalty": 0, "user": "u1",
            "response_format": {"type": "text"}}
    lines = [{"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": body | {"messages": [
                  {"role": "system", "content": "answer briefly"},
                  {"role": "user", "content": [{"type": "text", "text": f"add {i} 1="}]}]}}
             for i in range(6)]
    lines[2]["body"] = lines[2]["body"] | {"presence_penalty": 1.0,
                                           "logit_bias": {"999999": 5}}
    lines[3]["body"] = lines[3]["body"] | {"presence_penalty": 1.0, "min_p": 0.1,
                                           "repetition_penalty": 1.2, "min_tokens": 2,
                                           "logit_bias": {"5": -100}}
    lines[4]["url"] = "/v1/completions"
    lines[4]["body"] = {"prompt": "add 1 1=", "max_tokens": 8}
    path = write_jsonl(tmp_path / "chat.jsonl", lines)
    uploaded = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", extra_body={"block_length": 8})
    batch = wait_batch(client, batch.id)
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (4, 2)
    ok = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert [x["custom_id"] for x in ok] == ["chat-0", "chat-1", "chat-3", "chat-5"]
    for line in ok:
        assert line["response"]["body"]["object"] == "chat.completion"
        assert line["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
        assert line["response"]["body"]["usage"]["completion_tokens"] <= 8
    errors = {x["custom_id"]: x["error"]["message"] for x in
              map(json.loads, client.files.content(batch.error_file_id).text.splitlines())}
    assert errors == {
        "chat-2": "line 3: logit_bias names token 999999, outside the model's vocabulary "
                  f"of {VOCABULARY} tokens (ids 0 to {VOCABULARY - 1})",
        "chat-4": ("line 5: a /v1/chat/completions batch takes /v1/chat/completions "
                   "requests only, not /v1/completions")}


def test_cancel_expire_and_list_pages(sqlite_api, tmp_path):
    """No worker runs here: batches stay queued until cancelled or expired."""
    client = sqlite_api.client()
    path = write_jsonl(tmp_path / "in.jsonl", [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": f"add {i} 2=", **SMALL}} for i in range(5)])
    file_id = client.files.create(file=path.open("rb"), purpose="batch").id
    made = [client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                  completion_window="24h") for _ in range(4)]

    cancelled = client.batches.cancel(made[0].id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    errors = client.files.content(cancelled.error_file_id).text.splitlines()
    assert {json.loads(x)["error"]["code"] for x in errors} == {"batch_cancelled"}
    again = sqlite_api.http().post(f"/v1/batches/{made[0].id}/cancel")
    assert again.status_code == 409 and again.json()["error"]["type"] == "invalid_request_error"

    short = client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                  completion_window="1s")
    time.sleep(1.2)
    expired = client.batches.retrieve(short.id)
    assert expired.status == "expired" and expired.expired_at is not None
    assert (expired.request_counts.failed, expired.output_file_id) == (5, None)
    lines = [json.loads(x) for x in client.files.content(expired.error_file_id).text.splitlines()]
    assert [x["error"]["code"] for x in lines] == ["batch_expired"] * 5

    newest_first = [short.id] + [b.id for b in reversed(made)]
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == newest_first[:2] and page.has_more
    assert [b.id for b in page.iter_pages().__next__().data] == newest_first[:2]
    assert [b.id for b in client.batches.list(limit=2)] == newest_first  # auto-pagination
    last = client.batches.list(limit=2, after=newest_first[3])
    assert [b.id for b in last.data] == newest_first[4:] and not last.has_more

    second = client.files.create(file=path.open("rb"), purpose="batch")
    files = client.files.list(limit=1)
    assert [f.id for f in files.data] == [second.id] and files.has_more
    assert [f.id for f in client.files.list()] == [second.id, file_id]
    assert [f.id for f in client.files.list(order="asc", limit=1)] == [file_id, second.id]
    assert client.files.delete(second.id).deleted
    assert [f.id for f in client.files.list()] == [file_id]
