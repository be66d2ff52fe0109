"""Structured outputs on DiffusionGemma (docs/adr/043-structured-outputs-on-uniform-noise.md)
on a tiny checkpoint made with transformers' own classes whose character tokenizer spells
JSON: every answer that stops validates (jsonschema, regex, choice) and its tokens pass
its matcher one by one; "length" answers are valid prefixes; answers span several
canvases, each continuing from the matcher's state; unconstrained rows of a mixed batch
equal transformers' generate, and every row its batch-1 run; with the real vocabulary
size too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.constraints.spec import ConstraintSpec
from tests.constraints.test_structured_outputs import CHOICES, REGEX, SCHEMAS, valid
from tests.engine_requests import asked
from tests.json_models import big_vocab_tokenizer, write_json_diffusion_gemma
from tests.tiny_diffusion_gemma import CANVAS_LENGTH, write_tiny_diffusion_gemma
from tests.tiny_model import EOS_ID

GEN_LENGTH = 64  # eight canvases of 8
REAL_VOCAB = 262_144  # the real checkpoint's
JSON_OBJECT = ConstraintSpec.json_schema({"type": "object"})  # the service's json_object
SPECS: list[ConstraintSpec] = [*(ConstraintSpec.json_schema(s) for s in SCHEMAS.values()),
                               JSON_OBJECT, ConstraintSpec.regex(REGEX),
                               ConstraintSpec.choice(CHOICES)]


def prompt_ids(seed: int) -> list[int]:
    """Token ids of the JSON tokenizer's characters, longer than the sliding window."""
    return [4 + (seed * 7 + i * 3) % 48 for i in range(6 + seed % 5)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_json_diffusion_gemma(tmp_path_factory.mktemp("dg_json"))


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> Engine:
    return Engine.from_pretrained(checkpoint)


def config(**overrides: Any) -> GenerationConfig:
    return GenerationConfig(**({"gen_length": GEN_LENGTH, "early_stop": False} | overrides))


def passes_matcher(engine: Engine, spec: ConstraintSpec, tokens: list[int]) -> bool:
    """Every token up to the first stop passes a fresh matcher, one at a time; after a
    stop only stop and pad tokens."""
    matcher = engine.compile(spec).matcher()
    for i, token in enumerate(tokens):
        if token in engine.stop_ids:
            rest = set(tokens[i:]) - {*engine.stop_ids, engine.model.config.pad_token_id}
            return bool(matcher.is_accepting()) and not rest
        if not matcher.consume_token(token):
            return False
    return True


def test_every_answer_stops_valid_over_several_canvases(engine: Engine) -> None:
    seeds = list(range(len(SPECS)))
    results = engine.generate(asked([prompt_ids(s) for s in seeds], seeds=seeds,
                                    constraints=SPECS), config())
    for result, spec in zip(results, SPECS, strict=True):
        assert result.finish_reason == "stop", (spec.source, result.text)
        assert valid(spec, result.text), (spec.source, result.text)
        assert passes_matcher(engine, spec, result.token_ids)
    # the answers span canvases: each canvas after the first continued a matcher's state
    assert max(len(r.text) for r in results) > 2 * CANVAS_LENGTH


def test_unconstrained_rows_equal_transformers_and_every_row_its_batch_1_run(
        engine: Engine, checkpoint: Path) -> None:
    from transformers import DiffusionGemmaForBlockDiffusion

    specs: list[ConstraintSpec | None] = [SPECS[0], None, SPECS[4], None, SPECS[-2], None,
                                          SPECS[-1]]
    seeds = [3, 4, 5, 6, 7, 8, 9]
    prompts = [prompt_ids(s) for s in seeds]
    for batch in (8, 3):  # all together; rows leaving and joining mid-run
        mixed = engine.generate(asked(prompts, seeds=seeds, constraints=specs),
                                config(max_batch_size=batch))
        alone = [engine.generate(asked([p], seeds=[s], constraints=[c]), config())[0]
                 for p, s, c in zip(prompts, seeds, specs, strict=True)]
        assert [r.token_ids for r in mixed] == [r.token_ids for r in alone], batch
    hf = DiffusionGemmaForBlockDiffusion.from_pretrained(checkpoint).eval()
    for prompt, seed, spec, result in zip(prompts, seeds, specs, mixed, strict=True):
        if spec is None:
            torch.manual_seed(seed)
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=GEN_LENGTH)
            assert result.token_ids == out.sequences[0, len(prompt):].tolist()
        else:
            assert result.finish_reason == "stop" and valid(spec, result.text)


def test_length_answers_are_valid_prefixes(engine: Engine) -> None:
    # one canvas holds no whole nested object nor uuid: those end "length"
    specs = [ConstraintSpec.json_schema(SCHEMAS["nested"]),
             ConstraintSpec.json_schema(SCHEMAS["format"]), JSON_OBJECT]
    results = engine.generate(asked([prompt_ids(s) for s in range(3)], seeds=[0, 1, 2],
                                    constraints=specs), config(gen_length=6))
    assert [r.finish_reason for r in results[:2]] == ["length", "length"]
    for result, spec in zip(results, specs, strict=True):
        assert len(result.token_ids) == 6
        assert passes_matcher(engine, spec, result.token_ids)
    assert valid(specs[2], results[2].text)  # "{}" fits: the room bound closes it


def test_answers_stop_inside_gen_length_when_it_is_not_whole_canvases(engine: Engine
                                                                      ) -> None:
    # 11 tokens: a second canvas of which 3 columns count; "maybe so" and a stop need 9
    specs = [ConstraintSpec.choice(CHOICES), ConstraintSpec.regex(REGEX),
             ConstraintSpec.json_schema(SCHEMAS["pattern"])]
    results = engine.generate(asked([prompt_ids(s) for s in range(6)], seeds=list(range(6)),
                                    constraints=specs * 2), config(gen_length=11))
    for result, spec in zip(results, specs * 2, strict=True):
        assert len(result.token_ids) <= 11
        if result.finish_reason == "stop":
            assert valid(spec, result.text) and EOS_ID in result.token_ids
        assert passes_matcher(engine, spec, result.token_ids)
    assert {r.finish_reason for r in results[:2]} == {"stop"}  # choice and regex fit


def test_infill_and_constraints_together_are_still_refused(engine: Engine) -> None:
    from dinfer_engine import Infill

    with pytest.raises(ValueError, match="prompt 0: infill needs a bidirectional model"):
        engine.generate(asked([Infill(("ab", "cd"))], constraints=[SPECS[-1]]))


@pytest.mark.slow
def test_the_real_vocabulary_size(tmp_path: Path) -> None:
    """262,144 tokens (a synthetic BPE vocabulary that spells JSON): random logits rarely
    rank an allowed token among a position's best, so most choices are the witness's
    fallback; answers stop valid, and a free row beside them is transformers'."""
    from transformers import DiffusionGemmaForBlockDiffusion

    directory = write_tiny_diffusion_gemma(tmp_path / "dg_big", vocab_size=REAL_VOCAB)
    big_vocab_tokenizer(directory, REAL_VOCAB)
    engine = Engine.from_pretrained(directory)
    specs = [ConstraintSpec.json_schema(SCHEMAS["enum"]), ConstraintSpec.regex(REGEX), None]
    prompts = [prompt_ids(s) for s in range(3)]
    results = engine.generate(asked(prompts, seeds=[0, 1, 2], constraints=specs),
                              config(gen_length=24))
    for result, spec in zip(results[:2], specs[:2], strict=True):
        assert result.finish_reason == "stop" and valid(spec, result.text), result.text
    torch.manual_seed(2)
    out = DiffusionGemmaForBlockDiffusion.from_pretrained(directory).eval().generate(
        torch.tensor([prompts[2]]), max_new_tokens=24)
    assert results[2].token_ids == out.sequences[0, len(prompts[2]):].tolist()
