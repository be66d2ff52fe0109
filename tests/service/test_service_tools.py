"""Function calling end to end (docs/tools.md, ADR 061): `dinfer-batch run` on the demo
model over chat and /v1/responses lines with tools, as OpenAI's function-calling guide
writes them. Every call comes back in OpenAI's shape (the official client's types parse
it) with arguments that validate against its tool's schema (jsonschema); "none" answers
text; a line that cannot be honoured fails alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from dinfer_batch.formats.function_calling.tool_grammar import NO_PARAMETERS
from dinfer_models import DEMO
from tests.service_fixtures import _service
from tests.service_helpers import Service, read_jsonl, write_jsonl

# small: the demo's context is 256 characters, and the tools are rendered in the prompt
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD}},
              {"type": "function", "function": {"name": "no"}}]  # takes no arguments
SCHEMAS = {"add": ADD, "no": NO_PARAMETERS}


@pytest.fixture
def demo_service(sqlite_url: str) -> Iterator[Service]:
    yield from _service(sqlite_url, Path(DEMO))


def chat(custom_id: str, prompt: str, **body: object) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "demo", "messages": [{"role": "user", "content": prompt}],
                     "tools": CHAT_TOOLS, "max_tokens": 48} | body}


def test_tool_lines_run_on_the_demo_model(demo_service, tmp_path):
    lines = [
        chat("required", "json add 12 30=", tool_choice="required"),
        chat("one", "json add 1 2=", tool_choice="required", parallel_tool_calls=False),
        chat("named", "json add 3 4=", tool_choice={"type": "function",
                                                     "function": {"name": "add"}}),
        chat("auto", "add 1 2="),
        chat("none", "add 1 2=", tool_choice="none"),
        {"custom_id": "responses", "method": "POST", "url": "/v1/responses", "body": {
            "model": "demo", "input": "json add 5 6=", "max_output_tokens": 48,
            "tools": [{"type": "function", "name": "add", "parameters": ADD}],
            "tool_choice": "required"}},
        chat("bad", "x", tools=[{"type": "function", "function": {"name": "a b"}}]),
    ]
    path, out = write_jsonl(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    result = demo_service.cli("run", path, "-o", out)
    assert result.exit_code in (0, 1), result.output
    by_id = {line["custom_id"]: line for line in read_jsonl(out)}
    assert "name must be 1 to 64 letters" in by_id.pop("bad")["error"]["message"]
    responses = Response.model_validate(by_id.pop("responses")["response"]["body"])
    bodies = {key: ChatCompletion.model_validate(line["response"]["body"])
              for key, line in by_id.items()}
    for key in ("required", "one", "named"):
        choice = bodies[key].choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None
        for call in choice.message.tool_calls or []:
            assert call.id.startswith("call_")
            jsonschema.validate(json.loads(call.function.arguments),
                                SCHEMAS[call.function.name])
    assert len(bodies["one"].choices[0].message.tool_calls or []) == 1
    assert {c.function.name for c in bodies["named"].choices[0].message.tool_calls or []} \
        == {"add"}
    auto = bodies["auto"].choices[0]
    assert (auto.message.tool_calls is None) == (auto.finish_reason != "tool_calls")
    assert bodies["none"].choices[0].message.tool_calls is None
    assert isinstance(bodies["none"].choices[0].message.content, str)
    calls = [item for item in responses.output if item.type == "function_call"]
    assert calls and responses.status == "completed"
    for call in calls:
        assert call.name == "add" and call.call_id.startswith("call_")
        jsonschema.validate(json.loads(call.arguments), ADD)
