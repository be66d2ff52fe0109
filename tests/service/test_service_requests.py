"""Input lines: the three accepted shapes, and a specific message for each bad one."""

import json

import pytest

from dinfer_batch.formats.limits import InvalidParam
from dinfer_batch.formats.lines.requests import parse_line
from dinfer_batch.formats.parameters.params import check_params, engine_fields


def test_plain_chat_and_openai_lines_normalise_alike():
    plain = parse_line(json.dumps({"prompt": "hi", "max_tokens": 8, "custom_id": "a"}), 1)
    chat = parse_line(json.dumps({"messages": [{"role": "user", "content": "hi"}]}), 2)
    openai = parse_line(json.dumps({"custom_id": "c", "method": "POST",
                                    "url": "/v1/chat/completions",
                                    "body": {"model": "x", "messages": [
                                        {"role": "user", "content": "hi"}],
                                        "temperature": 0.5, "seed": 3}}), 3)
    assert plain.request == {"prompt": "hi", "params": {"max_tokens": 8}}
    assert plain.custom_id == "a" and plain.error is None
    assert chat.request == {"messages": [{"role": "user", "content": "hi"}], "params": {}}
    assert openai.request["params"] == {"temperature": 0.5, "seed": 3}
    assert openai.custom_id == "c"


@pytest.mark.parametrize(("text", "message"), [
    ('{"prompt": "x"\n', "line 7: invalid JSON at column 15: Expecting ',' delimiter"),
    ("[1, 2]", "line 7: expected a JSON object, got list"),
    ('{"max_tokens": 8}', "line 7: missing 'prompt'; a line is {\"prompt\": \"...\"}"),
    ('{"url": "/v1/completions", "body": {"input": "x"}}', "line 7: missing 'prompt' in body"),
    ('{"prompt": 5}', "line 7: prompt must be a non-empty string, a list of token ids"),
    ('{"prompt": ""}', "line 7: prompt must be a non-empty string"),
    ('{"prompt": "x", "custom_id": 4}', "line 7: custom_id must be a string, got 4"),
    ('{"prompt": "x", "max_tokens": "8"}', "line 7: max_tokens must be a positive integer"),
    ('{"prompt": "x", "temperature": -1}', "line 7: temperature must be a number >= 0"),
    ('{"prompt": "x", "decoder": "magic"}', "line 7: decoder must be one of fixed, threshold"),
    ('{"prompt": "x", "n": 200}', "line 7: n must be at most 128, got 200"),
    ('{"prompt": "x", "top_p": 1.5}', "line 7: top_p must be a number in (0, 1]"),
    ('{"prompt": "x", "top_k": 0.5}', "line 7: top_k must be a positive integer, or -1"),
    ('{"prompt": "x", "top_a": 0.9}', "line 7: unknown parameter(s) top_a"),
    ('{"messages": "hi"}', "line 7: messages must be a non-empty list"),
    ('{"messages": [{"content": "x"}]}', "line 7: messages[0] must be an object"),
    ('{"messages": [{"role": "user"}]}', "line 7: messages[0].content must be a string or"),
    ('{"url": "/v1/embeddings", "body": {}}', "line 7: unknown url '/v1/embeddings'"),
    ('{"url": "/v1/completions", "method": "GET", "body": {"prompt": "x"}}',
     "line 7: method must be POST"),
    ('{"url": "/v1/completions", "body": "x"}', "line 7: body must be a JSON object"),
    ('{"url": "/v1/completions", "body": {"messages": []}}',
     "line 7: 'messages' does not belong in a 'prompt' request"),
])
def test_bad_lines_fail_with_their_line_number_and_reason(text, message):
    parsed = parse_line(text, 7)
    assert parsed.request is None
    assert parsed.error.startswith(message), parsed.error


def test_params_map_to_engine_names_and_keep_service_only_ones_out():
    params = check_params({"max_tokens": 16, "stop": ".", "n": 1, "seed": None})
    assert params == {"max_tokens": 16, "stop": ["."], "n": 1}
    assert engine_fields(params) == {"gen_length": 16}
    with pytest.raises(InvalidParam, match="seed must be an integer >= 0"):
        check_params({"seed": -1})
