"""`/v1/responses` batch lines as OpenAI's docs write them: the body becomes a chat-shaped
request, fields that change nothing are accepted, those we cannot honour fail the line
naming the field; a finished item becomes a Response object the official types parse."""

import json

import pytest
from openai.types.responses import Response

from dinfer_batch.formats.lines.requests import endpoint_of, parse_line
from dinfer_batch.formats.results.output import ItemRow, JobFields, batch_output


def line(**body):
    body = {"model": "gpt-4.1-mini", "input": "Tell me a joke."} | body
    return json.dumps({"custom_id": "r1", "method": "POST", "url": "/v1/responses",
                       "body": body})


def test_the_openai_docs_line_runs_unchanged():
    parsed = parse_line(line(instructions="Be brief.", max_output_tokens=16,
                             temperature=0.5, top_p=0.9, metadata={"k": "v"}, store=False,
                             user="u1", tools=[], tool_choice="none", truncation="disabled",
                             parallel_tool_calls=True, text={"format": {"type": "text"}}), 1)
    assert parsed.error is None, parsed.error
    assert parsed.request == {
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Tell me a joke."}],
        "params": {"max_tokens": 16, "temperature": 0.5, "top_p": 0.9},
        "responses": {"instructions": "Be brief.", "metadata": {"k": "v"},
                      "text": {"format": {"type": "text"}}},
        "spelt": {"max_tokens": "max_output_tokens"}}  # for errors found later
    assert endpoint_of(parsed.request) == "/v1/responses"


def test_message_items_with_text_parts():
    parsed = parse_line(line(input=[
        {"role": "developer", "content": "Answer in French."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Hello"},
                     {"type": "input_text", "text": "there"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Bonjour"}]},
        {"role": "user", "content": "again"}]), 7)
    assert parsed.error is None, parsed.error
    assert parsed.request["messages"] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hello\nthere"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "again"}]


def test_text_format_json_schema_is_checked_as_a_chat_response_format():
    """One code path: the same body's response_format on a chat line gives the same
    verdict (refused while structured output is not built, accepted once it is)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    parsed = parse_line(line(text={"format": {"type": "json_schema", "name": "answer",
                                              "schema": schema, "strict": True}}), 3)
    chat = parse_line(json.dumps({"url": "/v1/chat/completions", "body": {
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": schema, "strict": True}}}}), 3)
    assert (parsed.error is None) == (chat.error is None)
    if parsed.error is not None:
        assert parsed.error.startswith("line 3: text.format: ") and chat.error is not None
        assert parsed.error.removeprefix("line 3: text.format: ") == \
            chat.error.removeprefix("line 3: ")
    else:
        assert parsed.request["params"] == chat.request["params"]


@pytest.mark.parametrize(("body", "message"), [
    ({"tools": [{"type": "web_search"}]},
     "tools[0] has type 'web_search': only function tools can be honoured"),
    ({"reasoning": {"effort": "high"}}, "reasoning cannot be honoured: the models have no "
                                        "reasoning mode"),
    ({"previous_response_id": "resp_1"}, "previous_response_id cannot be honoured"),
    ({"conversation": "conv_1"}, "conversation cannot be honoured"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0] has type 'input_image': only text parts"),
    ({"input": [{"type": "reasoning", "summary": []}]},
     "input[0] has type 'reasoning': only message, function_call and function_call_output"),
    ({"input": [{"type": "function_call_output", "output": "x"}]},
     "input[0].call_id must be a string, got None"),
    ({"input": ""}, "input must be a non-empty string"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role must be one of"),
    ({"max_tokens": 5}, "a /v1/responses body sets max_output_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens must be a positive integer"),
    ({"temperature": -1}, "temperature must be a number >= 0"),
    ({"stream": True}, "stream=True cannot be honoured"),
    ({"text": {"format": {"type": "xml"}}}, "text.format must be"),
    ({"truncation": "auto"}, "truncation cannot be honoured: prompts are never truncated"),
    ({"include": ["message.output_text.logprobs"]}, "include cannot be honoured"),
])
def test_fields_we_cannot_honour_fail_the_line_naming_them(body, message):
    body = {"model": "m", "input": "hi"} | body
    parsed = parse_line(json.dumps({"custom_id": "x", "url": "/v1/responses",
                                    "body": body}), 4)
    assert parsed.request is None
    assert parsed.error.startswith("line 4: ") and message in parsed.error, parsed.error


def test_missing_input_names_it():
    parsed = parse_line(json.dumps({"url": "/v1/responses", "body": {"model": "m"}}), 2)
    assert parsed.error == "line 2: missing 'input' in body"


JOB = JobFields("batch_abc", "dinfer_models/demo", "completed", {}, 0, 1_700_000_000.0)


def item(request, finish_reason="stop", samples=None):
    return ItemRow(5, "r1", "completed", None, None, request, "Why did the", samples,
                   finish_reason, 11, 4, 2, 0.5, 1_700_000_100.0, None, None, None)


@pytest.mark.parametrize("finish_reason", ["stop", "length"])
def test_output_bodies_parse_as_the_official_response_type(finish_reason):
    request = parse_line(line(instructions="Be brief.", metadata={"k": "v"},
                              max_output_tokens=4), 5).request
    out = batch_output(JOB, item(request, finish_reason))
    assert out["response"]["status_code"] == 200 and out["error"] is None
    response = Response.model_validate(out["response"]["body"])
    assert response.object == "response" and response.output_text == "Why did the"
    assert response.output[0].role == "assistant"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (11, 4, 15)
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.instructions == "Be brief." and response.metadata == {"k": "v"}
    assert response.max_output_tokens == 4 and response.model == "dinfer_models/demo"
    if finish_reason == "length":
        assert response.status == "incomplete"
        assert response.incomplete_details.reason == "max_output_tokens"
    else:
        assert response.status == "completed" and response.incomplete_details is None


def test_cached_tokens_are_the_prompt_tokens_the_prefix_cache_gave_back():
    """Up to the prompt, counted once as `input_tokens` is (ADR 040)."""
    request = parse_line(line(), 5).request
    for reused, cached in ((8, 8), (30, 11), (None, 0)):
        row = item(request)._replace(prefix_tokens_reused=reused)
        body = batch_output(JOB, row)["response"]["body"]
        assert Response.model_validate(body).usage.input_tokens_details.cached_tokens == cached


def test_n_samples_are_one_assistant_message_each():
    request = parse_line(line(n=2), 5).request
    samples = [{"text": t, "finish_reason": "stop", "completion_tokens": 2, "nfe": 1,
                "latency_s": 0.1, "logprobs": None} for t in ("one", "two")]
    body = batch_output(JOB, item(request, samples=samples))["response"]["body"]
    response = Response.model_validate(body)
    assert [m.content[0].text for m in response.output] == ["one", "two"]
    assert len({m.id for m in response.output}) == 2


@pytest.mark.parametrize(("metadata", "message"), [
    ({"note": "x" * 513}, "line 1: metadata['note'] is longer than 512 characters"),
    ({"k" * 65: "v"}, "line 1: a metadata key is longer than 64 characters"),
    ({f"k{i}": "v" for i in range(17)}, "line 1: metadata has 17 pairs; at most 16"),
    ({"n": 5}, "line 1: metadata['n'] must be a string, got 5"),
    (["a"], "line 1: metadata must be an object, got ['a']"),
])
def test_metadata_echoed_on_the_result_has_openais_bounds(metadata, message):
    assert parse_line(line(metadata=metadata), 1).error == message
