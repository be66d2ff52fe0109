"""The official `openai` client runs a `/v1/responses` batch end to end against a real
server and worker: lines as OpenAI's docs write them, refused fields failing their line
alone, and every output body parsed by the client's own `Response` type."""

import json

import pytest
from openai.types.responses import Response

from tests.api.test_api_batches import wait_batch
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration


def test_a_responses_batch_with_the_official_client(sqlite_api, tmp_path):
    api = sqlite_api
    api.service.start_worker(tmp_path / "worker.log")
    client = api.client()
    body = {"model": "gpt-4.1-mini", "max_output_tokens": 8, "temperature": 0,
            "metadata": {"source": "docs"}, "store": False}
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses",
              "body": body | {"input": f"add {i} 1="}} for i in range(4)]
    lines[1]["body"] = body | {"instructions": "Answer briefly.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "add 2 2="}]}]}
    lines[2]["body"] = body | {"input": "x", "tools": [{"type": "web_search"}]}
    lines[3]["url"] = "/v1/chat/completions"
    lines[3]["body"] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    lines.append({"custom_id": "long", "method": "POST", "url": "/v1/responses",
                  "body": body | {"input": "count:", "max_output_tokens": 4}})
    uploaded = client.files.create(file=write_jsonl(tmp_path / "in.jsonl", lines).open("rb"),
                                   purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses",
                                  completion_window="24h", extra_body={"block_length": 4})
    assert batch.endpoint == "/v1/responses"
    batch = wait_batch(client, batch.id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.completed, batch.request_counts.failed) == (3, 2)
    assert batch.usage.output_tokens > 0

    ok = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert [x["custom_id"] for x in ok] == ["r0", "r1", "long"]
    for line in ok:
        response = Response.model_validate(line["response"]["body"])
        assert response.object == "response" and response.output[0].role == "assistant"
        assert response.output_text == response.output[0].content[0].text
        assert 0 < response.usage.output_tokens <= response.max_output_tokens
        assert response.usage.total_tokens == (response.usage.input_tokens
                                               + response.usage.output_tokens)
        assert response.metadata == {"source": "docs"}
        assert response.status in ("completed", "incomplete")
        assert (response.status == "incomplete") == (response.incomplete_details is not None)
    assert Response.model_validate(ok[1]["response"]["body"]).instructions == "Answer briefly."
    assert sum(Response.model_validate(x["response"]["body"]).usage.output_tokens
               for x in ok) == batch.usage.output_tokens
    errors = {x["custom_id"]: x["error"]["message"] for x in
              map(json.loads, client.files.content(batch.error_file_id).text.splitlines())}
    assert errors == {
        "r2": "line 3: tools[0] has type 'web_search': only function tools can be honoured "
              "(no hosted, custom or built-in tools)",
        "r3": "line 4: a /v1/responses batch takes /v1/responses requests only, not "
              "/v1/chat/completions"}
