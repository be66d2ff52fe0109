"""Fill-in-the-middle lines (docs/infill.md): `suffix` on completions and native lines,
several gaps, the `infill_lengths` search; chat lines with a suffix fail; the results are
the engine's own, through `dinfer-batch run`."""

from __future__ import annotations

import json

import pytest

from dinfer_batch.formats.lines.infill import answer_tokens
from dinfer_batch.formats.lines.requests import parse_line, prompt_text, render_prompt
from dinfer_engine import Engine, GenerationConfig, Infill
from tests.engine_requests import asked
from tests.service_helpers import read_jsonl, write_jsonl
from tests.tiny_moe import write_tiny_moe


def completions_line(**body) -> str:
    return json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/completions",
                       "body": {"model": "m", "prompt": "def f(a):\n"} | body})


def test_openai_suffix_becomes_an_infill_request():
    parsed = parse_line(completions_line(suffix="\n    return b\n", max_tokens=16), 1)
    assert parsed.error is None, parsed.error
    assert parsed.request == {"prompt": "def f(a):\n", "suffix": ["\n    return b\n"],
                              "params": {"max_tokens": 16}}
    assert render_prompt(parsed.request, None) == Infill(["def f(a):\n", "\n    return b\n"])
    assert prompt_text(parsed.request) == "def f(a):\n\n    return b\n"


def test_native_line_with_several_gaps_and_a_length_search():
    gaps = parse_line(json.dumps({"prompt": "x = (", "suffix": [", ", ")"],
                                  "spans": [4, 6]}), 3)
    assert gaps.error is None and gaps.request is not None
    assert render_prompt(gaps.request, None) == Infill(["x = (", ", ", ")"], spans=[4, 6])
    assert answer_tokens(gaps.request, {}, 32) == 10
    search = parse_line(json.dumps({"prompt": "a", "suffix": "b",
                                    "infill_lengths": [32, 8, 16, 8]}), 4)
    assert search.request is not None
    assert search.request["params"] == {"infill_lengths": [8, 16, 32]}
    assert render_prompt(search.request, None) == Infill(["a", "b"], lengths=[8, 16, 32])
    assert answer_tokens(search.request, search.request["params"], 64) == 32
    auto = parse_line(json.dumps({"prompt": "a", "suffix": "b", "infill_lengths": "auto"}), 5)
    assert auto.request is not None
    assert answer_tokens(auto.request, auto.request["params"], 64) == 64


@pytest.mark.parametrize(("line", "message"), [
    ({"messages": [{"role": "user", "content": "hi"}], "suffix": "x"},
     "suffix (fill in the middle) belongs to completions lines"),
    ({"prompt": "a", "suffix": 3}, "suffix must be a string, or a list of 1 to 64"),
    ({"prompt": "a", "suffix": []}, "suffix must be a string, or a list"),
    ({"prompt": "a", "suffix": ["b", "c"], "spans": [4]}, "spans must be a list of 2"),
    ({"prompt": "a", "suffix": "b", "spans": [0]}, "spans must be a list of 1 positive"),
    ({"prompt": "a", "spans": [4]}, "this line has no suffix"),
    ({"prompt": "a", "infill_lengths": [8]}, "infill_lengths searches the length"),
    ({"prompt": "a", "suffix": "b", "infill_lengths": "best"}, "must be 'auto' or a list"),
    ({"prompt": "a", "suffix": "b", "infill_lengths": [0]}, "must be 'auto' or a list"),
    ({"prompt": "a", "suffix": "b", "infill_lengths": [8], "spans": [8]},
     "either spans (fixed gap lengths) or infill_lengths"),
])
def test_bad_infill_lines_fail_with_a_specific_error(line, message):
    parsed = parse_line(json.dumps(line), 7)
    assert parsed.request is None
    assert parsed.error is not None and parsed.error.startswith("line 7: ")
    assert message in parsed.error


def test_chat_body_with_a_suffix_fails_in_an_openai_line():
    line = json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": "hi"}],
                                "suffix": "x"}})
    assert "chat requests have no suffix" in (parse_line(line, 1).error or "")


def test_run_fills_the_gaps_as_the_engine_does(sqlite_service, tiny_checkpoint, tmp_path):
    """`dinfer-batch run` on a file mixing infill lines (one gap, several, a search) with
    ordinary and failing lines: each middle is the engine's, under the same settings."""
    common = {"max_tokens": 8, "block_length": 4, "steps": 8, "decoder": "fixed"}
    lines = [
        {"custom_id": "one", "prompt": "abc d", "suffix": "e fgh"} | common,
        {"custom_id": "openai", "method": "POST", "url": "/v1/completions",
         "body": {"model": "tiny", "prompt": "x = ", "suffix": [" y ", " z"],
                  "spans": [4, 6]} | common},
        {"custom_id": "search", "prompt": "12+3", "suffix": " 4",
         "infill_lengths": [4, 8]} | common,
        {"custom_id": "plain", "prompt": "hello"} | common,
        {"custom_id": "chat", "messages": [{"role": "user", "content": "hi"}],
         "suffix": "x"},
        {"custom_id": "two", "prompt": "ab", "suffix": "c", "n": 2,
         "temperature": 0.8} | common,
    ]
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out,
                                "--errors", errors)
    assert result.exit_code == 0, result.output
    bodies = {line["custom_id"]: line["response"]["body"] for line in read_jsonl(out)}
    [failed] = read_jsonl(errors)
    assert failed["custom_id"] == "chat" and "chat requests have no suffix" in \
        failed["error"]["message"]

    engine = Engine.from_pretrained(tiny_checkpoint)
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed")
    expected = engine.generate(asked([Infill(["abc d", "e fgh"]),
                                Infill(["x = ", " y ", " z"], spans=[4, 6]),
                                Infill(["12+3", " 4"], lengths=[4, 8]), "hello"],
                               seeds=[128, 256, 384, 512]), config)
    for name, want in zip(("one", "openai", "search", "plain"), expected, strict=True):
        body = bodies[name]
        assert body["object"] == "text_completion"
        choice = body["choices"][0]
        assert choice["text"] == want.text
        assert body["usage"]["completion_tokens"] == want.completion_tokens
        assert body["metrics"]["nfe"] == want.nfe
        if want.gaps is None:
            assert "gaps" not in choice and "infill" not in body["metrics"]
            continue
        assert choice["gaps"] == want.gaps
        [infill] = body["metrics"]["infill"]
        assert infill["spans"] == want.spans
    assert len(bodies["openai"]["choices"][0]["gaps"]) == 2
    sampled = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed",
                               temperature=0.8)
    two = engine.generate(asked([Infill(["ab", "c"])] * 2, seeds=[768, 769]), sampled)
    assert [c["text"] for c in bodies["two"]["choices"]] == [r.text for r in two]
    assert [c["gaps"] for c in bodies["two"]["choices"]] == [r.gaps for r in two]
    assert len(bodies["two"]["metrics"]["infill"]) == 2
    [search] = bodies["search"]["metrics"]["infill"]
    assert [c["length"] for c in search["length_search"]] == [4, 8]
    assert expected[2].length_search is not None
    assert [c["mean_logprob"] for c in search["length_search"]] == pytest.approx(
        [score for _, score in expected[2].length_search], abs=1e-6)


def test_infill_lines_on_a_block_diffusion_model_fail_at_ingest(sqlite_service, tmp_path):
    model = write_tiny_moe(tmp_path / "llada2", family="llada2")
    lines = [{"custom_id": "gap", "prompt": "a", "suffix": "b"},
             {"custom_id": "plain", "prompt": "a"}]
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out,
                                "--errors", errors, "--model", model, "--max-tokens", "8",
                                "--block-length", "8")
    assert result.exit_code == 0, result.output
    [failed] = read_jsonl(errors)
    assert failed["custom_id"] == "gap"
    assert failed["error"]["message"].startswith("line 1: infill (suffix) needs a "
                                                 "bidirectional model")
    assert [line["custom_id"] for line in read_jsonl(out)] == ["plain"]


def test_infill_lines_with_the_editing_decoder_fail_alone(sqlite_service, tmp_path):
    lines = [{"custom_id": "edit", "prompt": "a", "suffix": "b", "decoder": "editing"},
             {"custom_id": "preset", "prompt": "a", "suffix": "b", "preset": "speed"},
             {"custom_id": "plain", "prompt": "a", "suffix": "b"}]
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out,
                                "--errors", errors, "--max-tokens", "8", "--block-length", "8")
    assert result.exit_code == 0, result.output
    failed = read_jsonl(errors)
    assert [line["custom_id"] for line in failed] == ["edit", "preset"]
    assert all("cannot use the editing decoder" in line["error"]["message"] for line in failed)
    assert all(line["error"]["message"].startswith("line ") for line in failed)
    assert [line["custom_id"] for line in read_jsonl(out)] == ["plain"]
