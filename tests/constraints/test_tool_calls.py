"""Function calls valid by construction
(dinfer_batch/formats/function_calling/tool_grammar.py, ADR 061): on a random-weight
checkpoint whose unconstrained output is noise, with function tools whose parameters are
real schemas (JSONSchemaBench's Glaive function-calling set and Kubernetes), every call an
answer holds names one of its tools and its arguments validate against that tool's schema
(jsonschema), under "required", a named function and "auto", one call or several; an answer
cut short holds no call that is not complete and valid."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from dinfer_batch.formats.function_calling.tool_calls import answer_calls
from dinfer_batch.formats.function_calling.tool_grammar import tool_spec
from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintError
from dinfer_training.char_tokenizer import SPECIALS
from tests.engine_requests import asked
from tests.json_models import random_llada_beside, write_json_model

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
    results = engine.generate(asked(PROMPTS, seeds=list(range(len(PROMPTS))),
                                    constraints=[spec] * len(PROMPTS)), config())
    ended = [r for r in results if r.finish_reason == "stop"]
    assert len(ended) >= len(results) // 2, [r.text for r in results]
    calls = [check_calls(r.text, r.finish_reason, tools) for r in results]
    if choice != "auto":
        assert all(calls[i] for i, r in enumerate(results) if r.finish_reason == "stop")


def test_sampled_calls_validate_and_a_short_canvas_holds_no_unfinished_call(engine):
    tools = {"functions": FUNCTIONS[:3], "choice": "required", "parallel": True}
    spec = tool_spec(tools["functions"], "required", True)
    assert spec is not None
    sampled = engine.generate(asked(PROMPTS, seeds=list(range(6)),
                                    constraints=[spec] * len(PROMPTS)), config(temperature=1.5))
    short = engine.generate(asked(PROMPTS, constraints=[spec] * len(PROMPTS)),
                            config(gen_length=16, block_length=8))
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
    together = engine.generate(asked(prompts, seeds=list(range(len(specs))),
                                     constraints=specs), cfg)
    for i, (prompt, spec) in enumerate(zip(prompts, specs, strict=True)):
        alone = engine.generate(asked([prompt], seeds=[i], constraints=[spec]), cfg)[0]
        assert alone.token_ids == together[i].token_ids, (i, alone.text, together[i].text)


def production_like_checkpoint(directory: Path, byte_level: bool) -> Path:
    """A random LLaDA checkpoint whose tokenizer is trained here on calls' text: a
    byte-level BPE (LLaDA2's kind: spaces as `Ġ`, every byte a token) or a SentencePiece-
    style BPE with byte fallback (Gemma's and Mistral's kind: spaces as U+2581, bytes as
    `<0xNN>`), with merges, so tokens span JSON's punctuation and the names."""
    texts = [json.dumps({"name": f["name"], "arguments": {"city": "Paris", "n": i}})
             for i, f in enumerate(FUNCTIONS)] * 20 + ["héllo wörld 🙂", "what is it?"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = (pre_tokenizers.ByteLevel(add_prefix_space=False) if byte_level
                             else pre_tokenizers.Metaspace())
    backend.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else []))
    if byte_level:
        backend.decoder = decoders.ByteLevel()
    else:  # SentencePiece's layout: the 256 byte tokens are ordinary vocabulary entries
        trained = json.loads(backend.to_str())["model"]
        ordered = [*SPECIALS, *(f"<0x{b:02X}>" for b in range(256)),
                   *(t for t in trained["vocab"] if t not in SPECIALS)]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in trained["merges"]]
        pre = backend.pre_tokenizer
        backend = Tokenizer(models.BPE({t: i for i, t in enumerate(ordered)}, merges,
                                       byte_fallback=True, unk_token=SPECIALS[2]))
        backend.pre_tokenizer = pre
        backend.add_special_tokens(SPECIALS)
        backend.decoder = decoders.Sequence([  # Gemma's
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=SPECIALS[0],
                            eos_token=SPECIALS[1], unk_token=SPECIALS[2],
                            mask_token=SPECIALS[3]).save_pretrained(directory)
    return random_llada_beside(directory, backend.get_vocab_size())


@pytest.mark.parametrize("byte_level", [True, False])
def test_calls_are_valid_over_production_like_tokenizers(tmp_path, byte_level):
    engine = Engine.from_pretrained(production_like_checkpoint(tmp_path, byte_level))
    for choice, parallel in (("required", True), ("auto", False)):
        tools = {"functions": FUNCTIONS, "choice": choice, "parallel": parallel}
        spec = tool_spec(FUNCTIONS, choice, parallel)
        results = engine.generate(asked(PROMPTS, seeds=list(range(len(PROMPTS))),
                                        constraints=[spec] * len(PROMPTS)), config())
        assert sum(r.finish_reason == "stop" for r in results) >= len(results) // 2
        for result in results:
            check_calls(result.text, result.finish_reason, tools)


@pytest.mark.parametrize(("grammar", "message"), [
    ("start: (", "the grammar is not supported: 1(9): Expected token ')'"),
    ("start: foo", 'the grammar is not supported: at 1(8): unknown name: "foo"'),
    ("", "a Lark grammar must be a non-empty string")])
def test_a_lark_spec_that_llguidance_refuses_is_named(grammar, message):
    with pytest.raises(ConstraintError, match="^" + re.escape(message)):
        ConstraintSpec.lark(grammar).grammar()
    assert ConstraintSpec.from_dict(ConstraintSpec.lark("start: \"a\"").as_dict()).kind == "lark"
