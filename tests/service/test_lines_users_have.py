"""Lines as users have them (docs/adr/059-any-maximum-and-the-jobs-endpoint.md): any
maximum is an upper bound whose canvas (whole blocks) the quota counts; a line without
`method`/`url` takes the job's endpoint, else its body's kind."""

from __future__ import annotations

import json

import pytest

from dinfer_batch.formats.lines.requests import endpoint_of, parse_line
from dinfer_batch.jobs.intake.line_check import LineChecker, TextBatch
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_models import MODELS_DIR

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model_info(str(tiny_checkpoint), MODELS_DIR)


def checked(model, lines, endpoint=None, **params):
    checker = LineChecker(JobSpec(model=model, queue="q", chunk_size=8, params=params,
                                  endpoint=endpoint),
                          count_tokens=True,
                          max_request_tokens=params.pop("max_request_tokens", None))
    return checker(TextBatch(1, [json.dumps(line) for line in lines]))


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("maximum", [1, 7, 50, 100, 150, 1000])
def test_any_maximum_is_taken_on_every_endpoint(model, field, maximum):
    lines = [{"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
              "body": CHAT | {field: maximum, "block_length": 8}},
             {"prompt": "a", "max_tokens": maximum},
             {"custom_id": "r", "url": "/v1/responses",
              "body": {"input": "hi", "max_output_tokens": maximum}}]
    errors = [line.error for line in checked(model, lines)]
    if maximum + 2 < model.max_context:
        assert errors == [None, None, None]


def test_the_quota_counts_the_canvas_of_whole_blocks(model):
    """max_tokens=50 over blocks of 8: each sample decodes 56 tokens, and counts them."""
    [line] = checked(model, [{"prompt": "a", "max_tokens": 50, "block_length": 8, "n": 2}])
    prompt = model.token_counts(["a"])[0]
    assert line.error is None and line.tokens == prompt + 56 * 2
    [line] = checked(model, [{"prompt": "a", "max_tokens": 56, "block_length": 8}])
    assert line.tokens == prompt + 56


def test_the_key_ceiling_names_the_canvas(model):
    [line] = checked(model, [{"prompt": "a", "max_tokens": 50, "block_length": 8, "n": 2}],
                     max_request_tokens=100)
    assert line.error == ("line 1: max_tokens=50 (a canvas of 56: whole blocks) x n=2 = 112 "
                          "tokens is above this key's max_request_tokens of 100; ask for "
                          "fewer tokens or samples")


def test_an_explicit_block_that_cannot_fit_names_itself(model):
    [line] = checked(model, [{"prompt": "a", "max_tokens": 8,
                              "block_length": model.max_context + 1}])
    assert line.error is not None
    assert line.error.startswith(f"line 1: block_length must be at most {model.max_context}")


@pytest.mark.parametrize(("body", "url"), [
    (CHAT, "/v1/chat/completions"), ({"prompt": "a"}, "/v1/completions"),
    ({"input": "a"}, "/v1/responses")])
def test_a_line_without_url_takes_its_bodys_kind(body, url):
    parsed = parse_line(json.dumps({"custom_id": "0", "body": body}), 1)
    assert parsed.error is None and parsed.request is not None
    assert endpoint_of(parsed.request) == url


def test_a_line_without_url_takes_the_jobs_endpoint(model):
    mistral = [{"custom_id": "0", "body": {"max_tokens": 100, "messages": [
        {"role": "user", "content": "What is the best French cheese?"}]}},
        {"custom_id": "1", "body": {"prompt": "x"}},
        {"custom_id": "2", "method": "POST", "url": "/v1/completions", "body": {"prompt": "y"}}]
    first, second, third = checked(model, mistral, endpoint="/v1/chat/completions")
    assert first.error is None
    assert second.error == "line 2: 'prompt' does not belong in a 'messages' request"
    assert third.error == ("line 3: a /v1/chat/completions batch takes /v1/chat/completions "
                           "requests only, not /v1/completions")
    [line] = checked(model, [{"custom_id": "0", "body": {"nothing": 1}}])
    assert line.error is not None and "has no url and the batch no endpoint" in line.error


def test_lines_that_differ_only_in_what_follows_the_prompt_are_not_duplicates(model):
    """A list's later prompts, an infill line's suffix or spans are part of the request."""
    lines = checked(model, [{"prompt": "a", "suffix": "b"}, {"prompt": "a", "suffix": "c"},
                            {"prompt": "a", "suffix": "c", "spans": [4]},
                            {"prompt": ["a", "b"]}, {"prompt": ["a", "c"]},
                            {"prompt": "a", "suffix": "b"}])
    keys = [line.key for line in lines]
    assert len(set(keys[:5])) == 5 and keys[5] == keys[0]
