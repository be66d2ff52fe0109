"""Function calls valid by construction (dinfer_batch/formats/tool_grammar.py, ADR 061):
on a random-weight checkpoint whose unconstrained output is noise, with function tools
whose parameters are real schemas (JSONSchemaBench's Glaive function-calling set and
Kubernetes), every call an answer holds names one of its tools and its arguments
validate against that tool's schema (jsonschema), under "required", a named function
and "auto", one call or several; an answer cut short holds no call that is not
complete and valid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dinfer_batch.formats.tool_calls import answer_calls
from dinfer_batch.formats.tool_grammar import tool_spec
from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.json_models import write_json_model

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "jsonschemabench"


def bench_functions() -> list[dict[str, Any]]:
    """Functions named after the Glaive schemas' ids, and one Kubernetes schema with
    `$ref`s (rebased into the call's schema)."""
    glaive = [json.loads(line) for line in
              (BENCH / "Glaiveai2K.jsonl").read_text().splitlines()[:5]]
    kubernetes = json.loads((BENCH / "Kubernetes.jsonl").read_text().splitlines()[0])
    return [{"name": f"f{index}_{row['id'].split('_')[0]}", "parameters": row["schema"]}
            for index, row in enumerate([*glaive, kubernetes])]


FUNCTIONS = bench_functions()
PROMPTS = ["call a tool", "x", "what is the weather", "q", "tags?", "hi there"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("tools"), "llada"))


def config(**overrides: Any) -> GenerationConfig:
    fields: dict[str, Any] = dict(gen_length=128, block_length=16, steps=64,
                                  decoder="threshold", threshold=0.5)
    return GenerationConfig(**(fields | overrides))


def check_calls(text: str, finish: str, tools: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's calls, each of a listed function (the named one when one is named)
    and with arguments valid for it; a finished answer under "required" or a named
    function is calls, at most one when parallel calls are off."""
    calls = answer_calls(text, tools)
    by_name = {f["name"]: f for f in tools["functions"]}
    if calls is None:
        assert tools["choice"] == "auto", text
        assert not text.lstrip().startswith(("{", "[")), text
        return []
    if finish == "stop":
        assert calls, text
        assert not tools["parallel"] and len(calls) == 1 or tools["parallel"], text
    for call in calls:
        if isinstance(tools["choice"], dict):
            assert call["name"] == tools["choice"]["name"]
        jsonschema.validate(json.loads(call["arguments"]), by_name[call["name"]]["parameters"])
    return calls


@pytest.mark.parametrize(("choice", "parallel"), [
    ("required", False), ("required", True), ({"name": FUNCTIONS[2]["name"]}, True),
    ("auto", False), ("auto", True)])
def test_every_call_names_a_tool_and_its_arguments_validate(engine, choice, parallel):
    tools = {"functions": FUNCTIONS, "choice": choice, "parallel": parallel}
    spec = tool_spec(FUNCTIONS, choice, parallel)
    assert spec is not None
    results = engine.generate(PROMPTS, config(), seeds=list(range(len(PROMPTS))),
                              constraints=[spec] * len(PROMPTS))
    ended = [r for r in results if r.finish_reason == "stop"]
    assert len(ended) >= len(results) // 2, [r.text for r in results]
    calls = [check_calls(r.text, r.finish_reason, tools) for r in results]
    if choice != "auto":
        assert all(calls[i] for i, r in enumerate(results) if r.finish_reason == "stop")


def test_sampled_calls_validate_and_a_short_canvas_holds_no_unfinished_call(engine):
    tools = {"functions": FUNCTIONS[:3], "choice": "required", "parallel": True}
    spec = tool_spec(tools["functions"], "required", True)
    assert spec is not None
    sampled = engine.generate(PROMPTS, config(temperature=1.5), seeds=list(range(6)),
                              constraints=[spec] * len(PROMPTS))
    short = engine.generate(PROMPTS, config(gen_length=16, block_length=8),
                            constraints=[spec] * len(PROMPTS))
    for result in sampled + short:
        check_calls(result.text, result.finish_reason, tools)
    assert all(r.finish_reason == "length" for r in short)
    assert all(answer_calls(r.text, tools) == [] for r in short)


def test_max_tool_calls_bounds_the_array():
    spec = tool_spec(FUNCTIONS[:1], "required", True, max_calls=2)
    assert isinstance(spec, ConstraintSpec)
    schema = json.loads(spec.source)
    assert schema["anyOf"][1]["maxItems"] == 2
    assert tool_spec(FUNCTIONS[:1], "none", True) is None


def test_a_tool_row_gets_in_a_mixed_batch_what_it_gets_alone(engine):
    specs = [tool_spec(FUNCTIONS, "auto", True), None,
             tool_spec(FUNCTIONS[:2], "required", False),
             ConstraintSpec.regex("[a-c]{3}"),
             tool_spec(FUNCTIONS, {"name": FUNCTIONS[1]["name"]}, True)]
    prompts = PROMPTS[:len(specs)]
    cfg = config(temperature=0.8, block_length=8)
    together = engine.generate(prompts, cfg, seeds=list(range(len(specs))), constraints=specs)
    for i, (prompt, spec) in enumerate(zip(prompts, specs, strict=True)):
        alone = engine.generate([prompt], cfg, seeds=[i], constraints=[spec])[0]
        assert alone.token_ids == together[i].token_ids, (i, alone.text, together[i].text)
