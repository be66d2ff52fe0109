"""Function tools on batch lines (docs/tools.md, ADR 061): chat and /v1/responses bodies
as OpenAI's docs write them become requests with their tools, constraint and messages;
answers come back as `tool_calls` / `function_call` items that the official client's
types parse; what cannot be honoured fails the line, naming the field."""

import json

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from dinfer_batch.formats.lines.chat_prompt import chat_prompt
from dinfer_batch.formats.lines.requests import parse_line
from dinfer_batch.formats.results.output import ItemRow, JobFields, batch_output

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


# a user's question, the assistant's call and the tool's result: a later turn
CALLED_AND_ANSWERED = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"location": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "14 C"}]


def test_earlier_calls_and_their_results_are_accepted_and_rendered():
    request = parse_line(chat_line(messages=CALLED_AND_ANSWERED), 1).request
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


# a Hermes-style template that takes tools, and one that knows no tools (nor tool roles)
TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}:{{ t.function.parameters"
    " | tojson }};{% endfor %}</tools>{% endif %}{% for m in messages %}<{{ m.role }}>"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}</call>{% endfor %}{% else %}{{ m.content }}"
    "{% endif %}{% endfor %}<assistant>")
PLAIN_TEMPLATE = ("{% for m in messages %}{% if m.role not in ['system', 'user', "
                  "'assistant'] %}{{ raise_exception('role') }}{% endif %}<{{ m.role }}>"
                  "{{ m.content }}{% endfor %}<assistant>")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dinfer_models import DEMO

    return AutoTokenizer.from_pretrained(DEMO)


@pytest.mark.parametrize(("template", "expected"), [
    (TOOLS_TEMPLATE, '<tools>get_weather:{"type": "object", "properties": {"location": '),
    (PLAIN_TEMPLATE, '<system>tools: [{"name":"get_weather","description":"Get current'),
])
def test_tools_reach_the_chat_template(tokenizer, template, expected):
    request = parse_line(chat_line(messages=CALLED_AND_ANSWERED), 1).request
    tokenizer.chat_template = template
    try:
        text = tokenizer.decode(chat_prompt(request, tokenizer))
    finally:
        tokenizer.chat_template = None
    assert text.startswith(expected), text
    if template == TOOLS_TEMPLATE:  # the template had the arguments as a value
        assert '<assistant><call>get_weather{"location": "Paris"}</call><tool>14 C' in text
    else:
        assert text.endswith('<assistant>{"name": "get_weather", "arguments": {"location": '
                             '"Paris"}}<user>tool: 14 C<assistant>'), text


def test_n_samples_each_get_their_own_calls_and_ids():
    request = parse_line(chat_line(tool_choice="auto", n=2), 5).request
    samples = [{"text": t, "finish_reason": "stop", "completion_tokens": 2, "nfe": 1,
                "latency_s": 0.1, "logprobs": None} for t in (CALL, "Sunny.")]
    row = item(request, CALL)._replace(samples=samples)
    body = ChatCompletion.model_validate(batch_output(JOB, row)["response"]["body"])
    first, second = body.choices
    assert first.finish_reason == "tool_calls" and second.finish_reason == "stop"
    assert second.message.content == "Sunny." and second.message.tool_calls is None
    per_sample = [ChatCompletion.model_validate(batch_output(JOB, row, i)["response"]["body"])
                  for i in (0, 1)]
    assert per_sample[0].choices[0].message.tool_calls[0].id != \
        first.message.tool_calls[0].id  # each line's own request id
    assert per_sample[1].choices[0].message.content == "Sunny."


def test_lines_sharing_tools_share_their_prompt_prefix():
    """Tools come first in the prompt, so ingest places lines with the same tools together
    (jobs/intake/prefix_order.py)."""
    from dinfer_batch.jobs.intake.prefix_order import prefix_key

    def first_piece(line):
        return prefix_key(parse_line(line, 1).request)[:8]

    asked = [chat_line(messages=[{"role": "user", "content": f"Weather in city {i}?"}])
             for i in range(2)]
    assert first_piece(asked[0]) == first_piece(asked[1])
    assert first_piece(asked[0]) != first_piece(chat_line(tools=[{**CHAT_TOOL, "function": {
        **CHAT_TOOL["function"], "name": "get_forecast"}}]))


def test_max_tool_calls_is_echoed_on_the_response():
    request = parse_line(responses_line(max_tool_calls=2, tool_choice="required"), 5).request
    body = batch_output(JOB, item(request, f"[{CALL}, {CALL}]"))["response"]["body"]
    response = Response.model_validate(body)
    assert response.max_tool_calls == 2 and len(response.output) == 2
