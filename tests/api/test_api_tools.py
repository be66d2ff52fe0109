"""Function calling through the API with the official `openai` client (docs/tools.md,
ADR 061): a chat batch with tools runs on a real server and worker, every output body
parses as the client's ChatCompletion, and every call's arguments validate against its
tool's schema."""

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from openai.types.chat import ChatCompletion

from tests.api.test_api_batches import wait_batch
from tests.api_helpers import Api, start_api, stop_api
from tests.json_models import write_json_model
from tests.service_fixtures import _service
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration

# small: the test model's context is 256 characters, the tools' definitions among them
LOOKUP = {"type": "object", "properties": {"id": {"type": "integer"}, "kind": {
    "enum": ["a", "b"]}}, "required": ["id", "kind"]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": LOOKUP}},
         {"type": "function", "function": {"name": "ping"}}]


@pytest.fixture
def json_api(sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    for service in _service(sqlite_url, write_json_model(tmp_path / "json_model")):
        server = start_api(service, tmp_path)
        yield server
        stop_api(server)


def test_a_tools_batch_with_the_official_client(json_api, tmp_path):
    json_api.service.start_worker(tmp_path / "worker.log")
    client = json_api.client()
    choices = ["required", "auto", {"type": "function", "function": {"name": "lookup"}}]
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "x", "messages": [{"role": "user", "content": f"q{i}"}],
                       "tools": TOOLS, "tool_choice": choice, "max_tokens": 64}}
             for i, choice in enumerate(choices)]
    uploaded = client.files.create(file=write_jsonl(tmp_path / "in.jsonl", lines).open("rb"),
                                   purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", extra_body={"block_length": 16})
    batch = wait_batch(client, batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == 3, (
        batch.errors)
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    for line in out:
        choice = ChatCompletion.model_validate(line["response"]["body"]).choices[0]
        if choice.message.tool_calls is None:
            assert line["custom_id"] == "r1" and isinstance(choice.message.content, str)
            continue
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        for call in choice.message.tool_calls:
            schema = LOOKUP if call.function.name == "lookup" else {"maxProperties": 0}
            jsonschema.validate(json.loads(call.function.arguments), schema)
    named = ChatCompletion.model_validate(out[2]["response"]["body"]).choices[0]
    assert [c.function.name for c in named.message.tool_calls or []][:1] == ["lookup"]
