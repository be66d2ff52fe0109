"""The engine and the service's answers on production tokenizers (tests/assets/tokenizers/:
a SentencePiece BPE with byte fallback and a byte-level BPE, on tiny random checkpoints of
tests/tiny_production.py), through `dinfer-batch run`: answers decode as they stand in
the whole text (U+2581 spaces, bytes joined into characters across tokens), log
probabilities carry each token's own bytes, stop strings cut where they occur, and
structured answers (JSON schema, json_object, regex, choice) are valid by construction,
multi-byte characters included."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dinfer_engine import Engine
from dinfer_engine.constraints.vocabulary import spell_ids
from dinfer_engine.loading.tokenizer import load_tokenizer
from tests.corpus.corpus_check import run_file
from tests.service_helpers import write_jsonl
from tests.tiny_production import BYTE_LEVEL, SENTENCEPIECE, TOKENIZERS, WRITERS

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "count", "tags", "kind"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "count": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                                  "maxItems": 2},
                         "kind": {"enum": ["日本", "ꙮ", "🙂"]}}}
REGEX, UNICODE_REGEX = "[a-z]{3} [0-9]{2}", "(日本|ꙮ)+ 🙂"
CHOICES = ["yes", "no", "日本語", "ꙮ🙂"]
CHAT = [{"role": "user", "content": "Héllo 🙂, what is 日本?"}]
LINES = [
    {"custom_id": "schema", "messages": CHAT, "max_tokens": 64,
     "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
    {"custom_id": "schema-sampled", "messages": CHAT, "max_tokens": 64, "temperature": 1.0,
     "seed": 7, "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "x", "schema": SCHEMA}}},
    {"custom_id": "json-object", "messages": CHAT, "max_tokens": 32,
     "response_format": {"type": "json_object"}},
    {"custom_id": "regex", "prompt": "Hi", "max_tokens": 8,
     "structured_outputs": {"regex": REGEX}},
    {"custom_id": "regex-unicode", "prompt": "Hi", "max_tokens": 24,
     "structured_outputs": {"regex": UNICODE_REGEX}},
    {"custom_id": "choice", "prompt": "Hi", "max_tokens": 16,
     "structured_outputs": {"choice": CHOICES}},
    {"custom_id": "chat", "messages": CHAT, "max_tokens": 16, "logprobs": True,
     "top_logprobs": 2},
    {"custom_id": "completion", "prompt": "The capital of France is", "max_tokens": 16,
     "logprobs": 2},
]
Outputs = Callable[[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    """(tokenizer, lines) -> {custom_id: output line}: the lines through `dinfer-batch run`
    on that tokenizer's checkpoint."""
    folder = tmp_path_factory.mktemp("production_runs")
    models = {name: write(folder / name) for name, write in WRITERS.items()}

    def run(name: str, lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        path = write_jsonl(folder / f"{name}-{len(list(folder.iterdir()))}.jsonl", lines)
        return {o["custom_id"]: o for o in run_file(path, str(models[name]), folder)}

    return run


@pytest.fixture(scope="module")
def answers(outputs: Outputs) -> dict[str, dict[str, dict[str, Any]]]:
    return {name: outputs(name, LINES) for name in WRITERS}


def _choice(output: dict[str, Any]) -> dict[str, Any]:
    assert output["error"] is None, output["error"]
    choice: dict[str, Any] = output["response"]["body"]["choices"][0]
    return choice


def _text(choice: dict[str, Any]) -> str:
    return str(choice["text"] if "text" in choice else choice["message"]["content"])


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_structured_answers_are_valid_on_production_tokenizers(
        answers: dict[str, dict[str, dict[str, Any]]], name: str) -> None:
    got = answers[name]
    for key in ("schema", "schema-sampled"):
        choice = _choice(got[key])
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(_text(choice)), SCHEMA)
    choice = _choice(got["json-object"])
    assert choice["finish_reason"] == "length" or isinstance(json.loads(_text(choice)), dict)
    assert re.fullmatch(REGEX, _text(_choice(got["regex"])))
    assert re.fullmatch(UNICODE_REGEX, _text(_choice(got["regex-unicode"])))
    assert _text(_choice(got["choice"])) in CHOICES


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_logprobs_carry_each_tokens_bytes(answers: dict[str, dict[str, dict[str, Any]]],
                                          name: str) -> None:
    """A completion continues its prompt: its text is exactly the bytes its tokens spell,
    spaces and characters split across tokens included; each token's text is its bytes
    as UTF-8, or OpenAI's bytes:\\xNN where it holds part of a character. A chat answer
    may differ by the leading space the chat template's last token leaves to it."""
    choice = _choice(answers[name]["completion"])
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == answers[name]["completion"]["response"]["body"][
        "usage"]["completion_tokens"]
    chat = _choice(answers[name]["chat"])
    entries = chat["logprobs"]["content"]
    spelled = b"".join(bytes(e["bytes"]) for e in entries).decode("utf-8", "replace")
    assert spelled.removeprefix(" ") == _text(chat).removeprefix(" ")
    for entry in entries:
        raw = bytes(entry["bytes"])
        assert entry["token"] == raw.decode("utf-8", "replace") \
            or entry["token"].startswith("bytes:"), entry


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_completion_text_is_what_its_tokens_spell(name: str, tmp_path: Path) -> None:
    """The engine decodes an answer after the prompt's last tokens: SentencePiece's
    "\u2581Paris" continues "... is" as " Paris" (decoded alone it would be "Paris"), and
    byte-fallback or byte-level pieces of one character join."""
    engine = Engine.from_pretrained(WRITERS[name](tmp_path / name))
    tokenizer = engine.tokenizer
    prompt = tokenizer("The capital of France is")["input_ids"]
    whole = tokenizer("The capital of France is Paris, 日本 ꙮ🙂")["input_ids"]
    answer = whole[len(prompt):]
    assert engine._decode(answer, prompt) == " Paris, 日本 ꙮ🙂"
    assert b"".join(spell_ids(tokenizer, answer)) == " Paris, 日本 ꙮ🙂".encode()


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_infill_pieces_after_a_gap_are_encoded_as_they_continue(name: str) -> None:
    """A piece after a gap is encoded as it stands inside the whole text: no word marker
    of its own (SentencePiece would start "\\nprint" with a "\u2581")."""
    tokenizer = load_tokenizer(TOKENIZERS / name)
    engine = Engine.__new__(Engine)
    engine.tokenizer = tokenizer
    suffix = "\nprint(f(2))"
    whole = tokenizer("def f(x):\n    return x" + suffix)["input_ids"]
    continued = engine._continuation(suffix)
    assert whole[-len(continued):] == continued
    assert tokenizer.decode(continued) == suffix


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_stop_strings_cut_answers_where_they_occur(
        outputs: Outputs, answers: dict[str, dict[str, dict[str, Any]]], name: str) -> None:
    """A stop string taken from the middle of an answer cuts the same answer there, and
    its log-probabilities with it."""
    free = _text(_choice(answers[name]["completion"]))
    middle = len(free) // 2
    stop = free[middle:middle + 2]
    assert len(stop) == 2, free
    line = next(line for line in LINES if line["custom_id"] == "completion")
    cut = _choice(outputs(name, [line | {"stop": [stop]}])["completion"])
    assert cut["finish_reason"] == "stop"
    assert _text(cut) == free[:free.index(stop)]
    kept = cut["logprobs"]["tokens"]
    whole = _choice(answers[name]["completion"])["logprobs"]["tokens"]
    assert kept == whole[:len(kept)] and len(kept) < len(whole)
    assert "".join(kept).startswith(_text(cut)) or any(t.startswith("bytes:") for t in kept)


WEATHER = {"type": "object", "required": ["location"], "additionalProperties": False,
           "properties": {"location": {"type": "string", "maxLength": 24},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}


@pytest.mark.parametrize("name", [SENTENCEPIECE, BYTE_LEVEL])
def test_tool_calls_validate_on_production_tokenizers(outputs: Outputs, name: str) -> None:
    """vLLM's run_batch tool line (tool_choice "required"): the answer is a call whose
    arguments fit the function's parameters, on both tokenizers."""
    tool = {"type": "function", "function": {"name": "get_current_weather",
                                             "parameters": WEATHER}}
    line = {"custom_id": "tool", "max_tokens": 64, "tools": [tool], "tool_choice": "required",
            "messages": [{"role": "user", "content": "What is the weather in San Francisco?"}]}
    choice = _choice(outputs(name, [line])["tool"])
    assert choice["finish_reason"] == "tool_calls"
    for call in choice["message"]["tool_calls"]:
        assert call["function"]["name"] == "get_current_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)


def test_infill_on_production_tokenizers(outputs: Outputs) -> None:
    """A gap filled on the SentencePiece checkpoint (LLaDA's layout, bidirectional) comes
    back as the text its tokens spell after the prompt; LLaDA2's block-causal layout
    refuses infill by name."""
    line = {"custom_id": "infill", "prompt": "def f(x):\n    return", "max_tokens": 8,
            "suffix": "\n\nprint(f(2))", "logprobs": 1}
    choice = _choice(outputs(SENTENCEPIECE, [line])["infill"])
    gap = choice["gaps"][0]
    assert choice["text"] == gap and choice["finish_reason"] in ("stop", "length")
    tokens = choice["logprobs"]["tokens"]
    if not any(token.startswith("bytes:") for token in tokens):  # whole characters
        assert "".join(tokens) == gap
    refused = outputs(BYTE_LEVEL, [line])["infill"]["error"]
    assert "bidirectional" in refused["message"]
