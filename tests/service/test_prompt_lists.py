"""Completions' prompt lists and token ids, echo and best_of, and the fields that change
nothing (docs/adr/059-any-maximum-and-the-jobs-endpoint.md): each rule against a
reference written from OpenAI's definition."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dinfer_batch.formats.limits import InvalidParam
from dinfer_batch.formats.lines.cost import request_cost
from dinfer_batch.formats.lines.prompts import choice_seeds, kept, parse_prompt, row_seeds
from dinfer_batch.formats.lines.requests import parse_line
from dinfer_batch.formats.parameters.params import engine_fields
from dinfer_batch.formats.results.output import item_outcome
from dinfer_batch.jobs.intake.line_check import LineChecker, TextBatch
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_engine.result import GenerationResult
from dinfer_models import MODELS_DIR


class Letters:
    """A tokenizer of one letter per token: a is 0, b is 1, ..."""

    def decode(self, ids: list[int], **_: Any) -> str:
        return "".join(chr(97 + t) for t in ids)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [chr(97 + t) for t in ids]

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) - 97 for c in text]}


def result(tokens: list[int], logprobs: list[float], prompt_tokens: int = 3,
           nfe: int = 2) -> GenerationResult:
    return GenerationResult(text=Letters().decode(tokens), token_ids=tokens,
                            finish_reason="stop", prompt_tokens=prompt_tokens,
                            completion_tokens=len(tokens), nfe=nfe, seconds=0.1,
                            logprobs=logprobs, top_logprobs=[[] for _ in tokens])


def request(body: dict[str, Any], url: str = "/v1/completions") -> dict[str, Any]:
    parsed = parse_line(json.dumps({"custom_id": "x", "url": url, "body": body}), 1)
    assert parsed.error is None, parsed.error
    assert parsed.request is not None
    return parsed.request


@pytest.mark.parametrize(("prompt", "fields"), [
    ("hi", {"prompt": "hi"}), (["hi"], {"prompt": "hi"}), ([3, 4], {"prompt": [3, 4]}),
    (["a", "b"], {"prompt": "a", "prompts": ["a", "b"]}),
    ([[1], [2, 3]], {"prompt": [1], "prompts": [[1], [2, 3]]})])
def test_every_prompt_shape_openai_takes(prompt, fields):
    assert parse_prompt(prompt) == fields


@pytest.mark.parametrize("prompt", ["", [], ["a", [1]], [True], [-1], [[]], ["a", ""],
                                    ["a"] * 129, {"text": "a"}])
def test_other_prompts_are_refused_saying_what_is_taken(prompt):
    with pytest.raises(InvalidParam, match="prompt must be a non-empty string"):
        parse_prompt(prompt)


def test_a_list_draws_each_prompts_seeds_as_one_prompt_would():
    listed = request({"prompt": ["a", "b", "c"], "n": 2, "seed": 7})
    assert row_seeds(listed, listed["params"], 0, 5) == [7, 8, 7, 8, 7, 8]
    unseeded = request({"prompt": ["a", "b"], "best_of": 3})
    assert row_seeds(unseeded, unseeded["params"], 100, 2) == [356, 357, 358] * 2


def best_n_reference(scores: list[float | None], n: int) -> list[int]:
    """OpenAI's best_of: the n draws of highest mean log-probability, best first."""
    ranked = [(score if score is not None else float("-inf"), -i, i)
              for i, score in enumerate(scores)]
    return [i for *_, i in sorted(ranked, reverse=True)[:n]]


@pytest.mark.parametrize("scores", [[-1.0, -0.5, -2.0], [None, -3.0, -3.0, -0.1],
                                    [-0.2, -0.2, None, -0.2]])
def test_best_of_keeps_the_best_n_by_mean_log_probability(scores):
    for n in range(1, len(scores) + 1):
        assert kept(scores, n) == best_n_reference(scores, n)


def test_choices_are_indexed_prompt_by_prompt_and_best_of_drops_the_rest():
    """Two prompts, best_of 3, n 2: per prompt the two best draws, in the order
    prompt_index * n + sample; logprobs asked for by best_of alone are not shown; usage
    counts each prompt once and the returned tokens; nfe every draw's forwards."""
    line = request({"prompt": ["ab", "cde"], "best_of": 3, "n": 2, "seed": 4})
    params = line["params"]
    assert engine_fields(params)["logprobs"] is True
    draws = [result([0], [-2.0], 2), result([1, 1], [-0.1, -0.3], 2), result([2], [-0.5], 2),
             result([3], [-0.9], 3), result([], [], 3), result([4, 5], [-0.1, -0.2], 3)]
    outcome = item_outcome(1, draws, line, params, Letters())
    assert outcome.samples is not None
    assert [s["text"] for s in outcome.samples] == ["bb", "c", "ef", "d"]
    assert [s["draw"] for s in outcome.samples] == [1, 2, 2, 0]
    assert all("logprobs" not in s for s in outcome.samples)
    assert (outcome.prompt_tokens, outcome.completion_tokens, outcome.nfe) == (5, 6, 12)
    assert choice_seeds(line, params, 0, 1, outcome.samples) == [5, 6, 6, 4]


def test_echo_puts_the_prompt_before_the_answer_and_its_tokens_before_the_logprobs():
    line = request({"prompt": "cab", "echo": True, "logprobs": 1})
    outcome = item_outcome(1, [result([3], [-0.25])], line, line["params"], Letters())
    assert outcome.text == "cabd"
    assert outcome.logprobs == [
        {"token": "c", "logprob": None, "top_logprobs": []},
        {"token": "a", "logprob": None, "top_logprobs": []},
        {"token": "b", "logprob": None, "top_logprobs": []},
        {"token": "d", "logprob": -0.25, "bytes": [100], "top_logprobs": []}]
    ids = request({"prompt": [2, 0], "echo": True})
    assert item_outcome(1, [result([3], [-0.25])], ids, ids["params"], Letters()).text == "cad"


@pytest.mark.parametrize(("body", "url", "message"), [
    ({"messages": [{"role": "user", "content": "x"}], "echo": True}, "/v1/chat/completions",
     "echo belongs to completions lines"),
    ({"messages": [{"role": "user", "content": "x"}], "best_of": 2}, "/v1/chat/completions",
     "best_of belongs to completions lines"),
    ({"input": "x", "best_of": 2}, "/v1/responses", "best_of belongs to completions lines"),
    ({"prompt": ["a", "b"], "suffix": "c"}, "/v1/completions", "suffix (fill in the middle)"),
    ({"prompt": "a", "suffix": "c", "echo": True}, "/v1/completions", "and no echo"),
])
def test_what_a_line_cannot_combine_is_refused_by_name(body, url, message):
    parsed = parse_line(json.dumps({"custom_id": "x", "url": url, "body": body}), 1)
    assert parsed.error is not None and message in parsed.error


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model_info(str(tiny_checkpoint), MODELS_DIR)


def checked(model, lines, **params):
    checker = LineChecker(JobSpec(model=model, queue="q", chunk_size=8, params=params),
                          count_tokens=True,
                          max_request_tokens=params.pop("max_request_tokens", None))
    return checker(TextBatch(1, [json.dumps(line) for line in lines]))


def test_cost_and_quota_count_every_prompt_and_draw(model):
    line = request({"prompt": ["a", "b"], "best_of": 3, "n": 1, "max_tokens": 8})
    assert request_cost(line, line["params"], model.config(line["params"])) == 6
    [ok, low, ids] = checked(model, [
        {"prompt": ["ab", "b"], "best_of": 3, "max_tokens": 8, "block_length": 8},
        {"prompt": "a", "best_of": 1, "n": 2},
        {"prompt": [[1, 2, 3]], "max_tokens": 5, "block_length": 8}])
    longest = model.token_counts(["ab"])[0]
    assert ok.error is None and ok.tokens == 2 * longest + 6 * 8 and ok.cost == 6
    assert low.error == ("line 2: best_of=1 must be at least n=2 (best_of samples are drawn, "
                         "the best n returned)")
    assert ids.error is None and ids.tokens == 3 + 8
    [over] = checked(model, [{"prompt": ["a", "b"], "n": 2, "max_tokens": 8,
                              "block_length": 8}], max_request_tokens=16)
    assert over.error is not None and "max_tokens=8 x 2 prompts x n=2 = 32 tokens" in over.error


@pytest.mark.parametrize(("name", "value"), [
    ("verbosity", "low"), ("store", True), ("service_tier", "flex"),
    ("prompt_cache_key", "k"), ("prompt_cache_retention", "24h"), ("metadata", {"a": "b"}),
    ("user", "u"), ("safety_identifier", "s"), ("parallel_tool_calls", False),
    ("stream_options", {"include_usage": True}), ("priority", 3), ("request_id", "r")])
def test_fields_that_cannot_change_the_answer_are_ignored(name, value):
    line = request({"messages": [{"role": "user", "content": "x"}], name: value},
                   "/v1/chat/completions")
    assert line["params"] == {}


@pytest.mark.parametrize(("name", "value", "message"), [
    ("stream", True, "a batch is never streamed"),
    ("reasoning_effort", "low", "no reasoning mode"),
    ("web_search_options", {}, "web search is not supported"),
    ("audio", {"voice": "alloy"}, "audio output"),
    ("use_beam_search", True, "decodes no beams"),
    ("prompt_logprobs", 1, "commits no prompt token")])
def test_what_no_diffusion_model_here_can_do_is_refused_by_name(name, value, message):
    parsed = parse_line(json.dumps({"custom_id": "x", "url": "/v1/chat/completions", "body": {
        "messages": [{"role": "user", "content": "x"}], name: value}}), 1)
    assert parsed.error is not None
    assert parsed.error.startswith(f"line 1: {name}") and message in parsed.error
