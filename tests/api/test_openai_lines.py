"""Request lines as real OpenAI batch files carry them: aliases, content parts, fields
that change nothing (accepted), and fields we cannot honour (the line fails, naming the
field and why)."""

import json

import pytest

from dinfer_batch.formats.lines.requests import parse_line


def chat_line(**body):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]} | body
    return json.dumps({"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                       "body": body})


def test_a_typical_openai_chat_line_runs_unchanged():
    parsed = parse_line(chat_line(
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "add 1 2="},
                                               {"type": "text", "text": "answer only"}]}],
        max_completion_tokens=16, temperature=0.7, top_p=0.9, frequency_penalty=0,
        presence_penalty=0.0, logit_bias={}, user="u-17", metadata={"run": "a"},
        store=False, stream=False, response_format={"type": "text"}, service_tier="auto",
        parallel_tool_calls=True, n=1, seed=5, logprobs=False), 1)
    assert parsed.error is None, parsed.error
    assert parsed.request == {
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "add 1 2=\nanswer only"}],
        "params": {"max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                   "frequency_penalty": 0.0, "presence_penalty": 0.0, "n": 1, "seed": 5,
                   "logprobs": False},
        "spelt": {"max_tokens": "max_completion_tokens"}}  # for errors found later


def test_logprobs_in_the_chat_and_the_legacy_completions_shapes():
    assert parse_line(chat_line(logprobs=True, top_logprobs=2), 1).request["params"] == {
        "logprobs": True, "top_logprobs": 2}
    legacy = json.dumps({"url": "/v1/completions", "body": {"prompt": "x", "logprobs": 3}})
    assert parse_line(legacy, 1).request["params"] == {"logprobs": True, "top_logprobs": 3}
    assert parse_line(chat_line(logprobs=False), 1).request["params"] == {"logprobs": False}


def test_top_k_minus_one_means_no_limit():
    assert parse_line(chat_line(top_k=-1), 1).request["params"] == {"top_k": 0}


@pytest.mark.parametrize(("body", "message"), [
    ({"frequency_penalty": 2.5}, "frequency_penalty must be a number in [-2, 2], got 2.5"),
    ({"presence_penalty": True}, "presence_penalty must be a number in [-2, 2], got True"),
    ({"repetition_penalty": 0}, "repetition_penalty must be a number > 0, got 0"),
    ({"min_p": 1.5}, "min_p must be a number in [0, 1], got 1.5"),
    ({"min_tokens": -1}, "min_tokens must be an integer >= 0, got -1"),
    ({"ignore_eos": 1}, "ignore_eos must be true or false, got 1"),
    ({"logit_bias": {"50256": -101}}, "logit_bias['50256'] must be a number from -100 to 100"),
    ({"logit_bias": {"-5": 1}}, "logit_bias keys must be token ids (decimal strings of "
                                "integers >= 0), got '-5'"),
    ({"logit_bias": {"007": 1}}, "logit_bias keys must be token ids"),
    ({"logit_bias": [1, 2]}, "logit_bias must be an object of at most 1024 entries mapping "
                             "token ids (decimal strings) to numbers from -100 to 100"),
    ({"logit_bias": {str(i): 1 for i in range(1025)}},
     "logit_bias must have at most 1024 entries (OpenAI's limit), got 1025"),
    ({"stream": True}, "stream=True cannot be honoured: a batch is never streamed"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}},
     "response_format.json_schema: schema.properties.n: keyword 'uniqueItems' is not "
     "supported"),
    ({"response_format": {"type": "xml"}},
     "response_format.type must be one of text, json_object, json_schema; got 'xml'"),
    ({"structured_outputs": {"grammar": "root ::= x"}},
     "structured_outputs must hold exactly one of json, regex, choice"),
    ({"tools": [{"type": "custom", "custom": {"name": "f"}}]},
     "tools[0] has type 'custom': only function tools can be honoured"),
    ({"functions": [{"name": "f"}]},
     "functions cannot be honoured: functions is OpenAI's deprecated form of tools"),
    ({"top_logprobs": 2}, "top_logprobs needs logprobs: true"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be an integer from 0 to 20"),
    ({"max_tokens": 8, "max_completion_tokens": 16},
     "max_completion_tokens and max_tokens disagree (16 vs 8)"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]},
     "messages[0].content[0] has type 'image_url': only text parts are supported"),
    ({"messages": [{"role": "user", "content": []}]},
     "messages[0].content must be a string or a non-empty list of content parts"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"id": "t"}]}]},
     "messages[0].tool_calls[0] must be {\"id\", \"type\": \"function\", \"function\""),
])
def test_what_we_cannot_honour_fails_the_line_naming_the_field(body, message):
    parsed = parse_line(chat_line(**body), 4)
    assert parsed.request is None
    assert parsed.error == f"line 4: {message}" or parsed.error.startswith(
        f"line 4: {message}"), parsed.error


def test_the_sampling_controls_are_generation_parameters():
    """OpenAI's and vLLM's controls ride in params, as the line wrote them (logit_bias
    ids are checked against the model's vocabulary with the model)."""
    parsed = parse_line(chat_line(
        logit_bias={"50256": -100, "7": 2.5}, presence_penalty=0.5, frequency_penalty=-1,
        repetition_penalty=1.1, min_p=0.05, ignore_eos=True, min_tokens=4), 1)
    assert parsed.error is None, parsed.error
    assert parsed.request["params"] == {
        "logit_bias": {"50256": -100.0, "7": 2.5}, "presence_penalty": 0.5,
        "frequency_penalty": -1.0, "repetition_penalty": 1.1, "min_p": 0.05,
        "ignore_eos": True, "min_tokens": 4}
