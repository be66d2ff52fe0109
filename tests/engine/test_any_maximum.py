"""gen_length is an upper bound (docs/adr/059-any-maximum-and-the-jobs-endpoint.md): the
canvas is whole blocks, the answer cut at gen_length; a constrained answer closes within
gen_length, not within the longer canvas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.constraints.test_structured_closing import PROMPTS, SPECS
from tests.engine_requests import asked
from tests.json_models import write_json_model


@pytest.mark.parametrize(("gen_length", "block", "canvas"), [(10, 4, 12), (1, 32, 32),
                                                             (50, 8, 56), (64, 32, 64)])
def test_the_canvas_is_whole_blocks(gen_length, block, canvas):
    resolved = GenerationConfig(gen_length=gen_length, block_length=block).resolve({})
    assert (resolved.canvas_length, resolved.num_blocks) == (canvas, canvas // block)
    assert resolved.steps == canvas  # one token per step of the canvas


@pytest.mark.parametrize("decoder", ["fixed", "threshold", "editing"])
def test_the_answer_is_the_canvas_cut_at_the_maximum(tiny_engine: Engine, decoder):
    """A canvas of 12 decodes the same whatever the maximum within it: the answer of a
    maximum of 10 is the first 10 tokens of the answer of 12, ending "length"."""
    prompts = ["hello", "a longer prompt here"]
    shared = {"block_length": 4, "steps": 12, "decoder": decoder, "early_stop": False,
              "threshold": 0.5, "logprobs": True}
    whole = tiny_engine.generate(prompts, GenerationConfig(gen_length=12, **shared))
    cut = tiny_engine.generate(prompts, GenerationConfig(gen_length=10, **shared))
    for full, part in zip(whole, cut, strict=True):
        assert part.token_ids == full.token_ids[:10]
        assert part.logprobs == full.logprobs[:10]
        assert part.completion_tokens == 10
        assert part.finish_reason == "length"


@pytest.fixture(scope="module")
def json_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_json_model(tmp_path_factory.mktemp("json") / "llada",
                                                   "llada"))


@pytest.mark.parametrize(("family", "decoder"), [("llada_moe", "threshold"),
                                                 ("llada2", "threshold"), ("llada2", "editing")])
def test_every_block_family_cuts_its_canvas(tmp_path: Path, family: str, decoder: str):
    """LLaDA-MoE, and the block-causal LLaDA2 canvas (blocks on the absolute grid; with
    LLaDA2.1's editing decoder too): a maximum of 20 over blocks of 8 is the first 20
    tokens of a canvas of 24."""
    engine = Engine.from_pretrained(write_json_model(tmp_path / family, family))
    shared = {"block_length": 8, "early_stop": False, "threshold": 0.5, "decoder": decoder}
    whole = engine.generate(["{", "give me json"], GenerationConfig(gen_length=24, **shared))
    cut = engine.generate(["{", "give me json"], GenerationConfig(gen_length=20, **shared))
    for full, part in zip(whole, cut, strict=True):
        assert part.token_ids == full.token_ids[:20] and part.completion_tokens == 20


def test_a_constrained_answer_closes_within_the_maximum(json_engine: Engine):
    """Blocks of 16 over a maximum of 50: the canvas is 64, the witness's room is 50, so
    the answers close (valid, "stop") within 50 tokens."""
    config = GenerationConfig(gen_length=50, block_length=16, steps=32, decoder="threshold",
                              threshold=0.5)
    results = json_engine.generate(asked(PROMPTS, constraints=SPECS), config)
    for result, spec in zip(results, SPECS, strict=True):
        assert result.finish_reason == "stop", (spec.source, result.text)
        assert result.completion_tokens <= 50
        jsonschema.validate(json.loads(result.text), json.loads(spec.source))


def test_a_constrained_answer_cut_short_is_a_valid_prefix(json_engine: Engine):
    """A maximum too small for any document: the answer is a prefix the grammar accepts,
    ending "length", never a complete-looking invalid one."""
    spec = ConstraintSpec.json_schema({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 40}}, "required": ["name"]})
    [result] = json_engine.generate(asked(["x"], constraints=[spec]),
                                    GenerationConfig(gen_length=6, block_length=16, steps=16))
    assert result.finish_reason == "length" and result.completion_tokens <= 6
    assert result.text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.text)
