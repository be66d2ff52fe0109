"""Function tools on batch lines (docs/tools.md, ADR 061): chat and /v1/responses bodies
as OpenAI's docs write them become requests with their tools, constraint and messages;
answers come back as `tool_calls` / `function_call` items that the official client's
types parse; what cannot be honoured fails the line, naming the field."""

import json

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from dinfer_batch.formats.chat_prompt import chat_prompt
from dinfer_batch.formats.output import ItemRow, JobFields, batch_output
from dinfer_batch.formats.requests import parse_line

WEATHER = {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location", "unit"], "additionalProperties": False}
CHAT_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get current temperature for a given location.",
    "parameters": WEATHER, "strict": True}}
FLAT_TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER,
             "description": "Get current temperature for a given location.", "strict": True}
JOB = JobFields("batch_abc", "demo", "completed", {}, 0, 1_700_000_000.0)
CALL = '{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}'


def chat_line(**body):
    body = {"model": "gpt-4.1", "messages": [
        {"role": "user", "content": "What is the weather like in Paris today?"}],
        "tools": [CHAT_TOOL]} | body
    return json.dumps({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                       "body": body})


def responses_line(**body):
    body = {"model": "gpt-4.1", "input": "What is the weather like in Paris today?",
            "tools": [FLAT_TOOL]} | body
    return json.dumps({"custom_id": "r1", "method": "POST", "url": "/v1/responses",
                       "body": body})


def item(request, text, finish_reason="stop"):
    return ItemRow(5, "r1", "completed", None, None, request, text, None, finish_reason,
                   11, 4, 2, 0.5, 1_700_000_100.0, None, None, None)


@pytest.mark.parametrize(("choice", "kind", "stored"), [
    (None, "lark", "auto"), ("auto", "lark", "auto"), ("required", "json_schema", "required"),
    ({"type": "function", "function": {"name": "get_weather"}}, "json_schema",
     {"name": "get_weather"}),
    ("none", None, "none")])
def test_tool_choice_decides_the_constraint(choice, kind, stored):
    request = parse_line(chat_line(tool_choice=choice), 1).request
    assert request["tools"] == {"functions": [{k: CHAT_TOOL["function"][k] for k in (
        "name", "description", "parameters")}], "choice": stored, "parallel": True}
    assert request["params"].get("structured", {}).get("kind") == kind


def test_parallel_tool_calls_false_allows_one_call_only():
    one = parse_line(chat_line(tool_choice="required", parallel_tool_calls=False), 1)
    many = parse_line(chat_line(tool_choice="required"), 1)
    assert "array" not in one.request["params"]["structured"]["source"]
    assert '"type":"array"' in many.request["params"]["structured"]["source"]


@pytest.mark.parametrize(("text", "finish", "calls", "reason"), [
    (CALL, "stop", 1, "tool_calls"),
    (f"[{CALL}, {CALL}]", "stop", 2, "tool_calls"),
    (f"[{CALL}, {CALL[:30]}", "length", 1, "length"),
    (CALL[:30], "length", 0, "length")])
def test_calls_come_back_as_tool_calls_the_client_parses(text, finish, calls, reason):
    request = parse_line(chat_line(tool_choice="required"), 5).request
    body = batch_output(JOB, item(request, text, finish))["response"]["body"]
    choice = ChatCompletion.model_validate(body).choices[0]
    assert choice.finish_reason == reason and choice.message.content is None
    got = choice.message.tool_calls or []
    assert len(got) == calls
    for call in got:
        assert call.id.startswith("call_") and call.type == "function"
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"location": "Paris, France",
                                                       "unit": "celsius"}
    assert len({call.id for call in got}) == calls
    again = batch_output(JOB, item(request, text, finish))["response"]["body"]
    assert again == body  # ids are the item's


def test_text_under_auto_and_none_is_the_message_content():
    for choice in ("auto", "none"):
        request = parse_line(chat_line(tool_choice=choice), 5).request
        body = batch_output(JOB, item(request, "It is sunny."))["response"]["body"]
        message = ChatCompletion.model_validate(body).choices[0].message
        assert message.content == "It is sunny." and message.tool_calls is None


def test_responses_function_calls_and_echoed_tools():
    request = parse_line(responses_line(tool_choice={"type": "function",
                                                     "name": "get_weather"}), 5).request
    response = Response.model_validate(batch_output(JOB, item(request, CALL))["response"]
                                       ["body"])
    (call,) = response.output
    assert call.type == "function_call" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.name == "get_weather"
    assert json.loads(call.arguments)["unit"] == "celsius"
    assert response.tools[0].name == "get_weather" and response.parallel_tool_calls
    assert response.tool_choice.name == "get_weather"
    text = Response.model_validate(batch_output(JOB, item(
        parse_line(responses_line(), 5).request, "Sunny."))["response"]["body"])
    assert text.output_text == "Sunny." and text.tool_choice == "auto"


def test_earlier_calls_and_their_results_are_accepted_and_rendered():
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {
                        "name": "get_weather", "arguments": '{"location": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "14 C"}]
    request = parse_line(chat_line(messages=messages), 1).request
    assert request["messages"][2] == {"role": "tool", "content": "14 C",
                                      "tool_call_id": "call_1"}
    prompt = chat_prompt(request, object())  # no chat template: the plain rendering
    assert prompt.startswith('tools: [{"name":"get_weather",')
    assert prompt.endswith('user: Weather in Paris?\nassistant: {"name": "get_weather", '
                           '"arguments": {"location": "Paris"}}\ntool: 14 C\nassistant: ')
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": '{"location": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "14 C"}]
    responses = parse_line(responses_line(input=items), 1).request
    assert responses["messages"] == request["messages"]


@pytest.mark.parametrize(("body", "message"), [
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]},
     "tools[0].function.name must be 1 to 64 letters, digits, underscores or dashes"),
    ({"tools": [CHAT_TOOL, CHAT_TOOL]}, "tools[1].function.name 'get_weather' is used by two"),
    ({"tool_choice": {"type": "function", "function": {"name": "other"}}},
     "tool_choice names the function 'other', which is not among the tools"),
    ({"tool_choice": "always"}, "tool_choice must be one of none, auto, required or"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice='required' needs tools"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls must be true or false"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}}}}]},
     "tools[0].function.parameters: schema.properties.t: keyword 'uniqueItems' is not "
     "supported"),
    ({"tool_choice": "auto", "response_format": {"type": "json_object"}},
     "tool_choice='auto' and a response format both shape the answer"),
    ({"function_call": "auto"}, "function_call cannot be honoured: function_call is "
                                "OpenAI's deprecated form of tool_choice"),
])
def test_what_cannot_be_honoured_fails_the_line_naming_the_field(body, message):
    parsed = parse_line(chat_line(**body), 4)
    assert parsed.request is None
    assert parsed.error.startswith(f"line 4: {message}"), parsed.error
