"""The "editing" decoder (LLaDA2.1's token editing) against the slow one-sequence loop of
tests/editing_reference.py: on a random LLaDA2.1-layout checkpoint (the float64 reference
model, and the engine's model recomputing the whole window), for several settings, with
and without early stop; each row of a mixed-length batch as its batch-size-1 run; on
dense LLaDA with no cache; presets, checkpoint recognition and validation."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from dinfer_batch.cli.app import main
from dinfer_batch.formats.parameters import params
from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.choices import PRESETS
from dinfer_engine.models.llada2 import LLaDA21MoeModelLM
from tests.editing_reference import llada21_generate
from tests.engine.test_engine_batching import mixed_prompts, stops_at
from tests.engine.test_engine_moe import full_window, until_eos
from tests.moe_reference import ReferenceMoE
from tests.tiny_model import EOS_ID
from tests.tiny_moe import write_tiny_moe

PROMPTS = [[5, 9, 12, 7, 30], [20, 21, 22, 23, 24, 25, 26, 27], [8]]
# (threshold, editing_threshold, max_post_steps, num_to_transfer): the published
# defaults, Speed, Quality, no post-steps, and several tokens a step at the least
SETTINGS = [(0.95, 0.9, 16, 1), (0.5, 0.0, 16, 1), (0.7, 0.5, 16, 1), (0.5, 0.0, 0, 1),
            (0.9, 0.3, 2, 3)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaDA2's tiny layout under LLaDA2.1's model_type (dllm's LLaDA2MoeConfig for 2.1)."""
    return write_tiny_moe(tmp_path_factory.mktemp("llada21") / "tiny", "llada2",
                          model_type="llada21_moe")


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> Engine:
    return Engine.from_pretrained(checkpoint)


def config_of(setting: tuple[float, float, int, int], **fields) -> GenerationConfig:
    threshold, editing_threshold, max_post_steps, num_to_transfer = setting
    return GenerationConfig(decoder="editing", threshold=threshold,
                            editing_threshold=editing_threshold,
                            max_post_steps=max_post_steps, num_to_transfer=num_to_transfer,
                            **fields)


def test_llada21_is_recognised_and_edits_by_default(engine):
    assert type(engine.model) is LLaDA21MoeModelLM
    resolved = engine.resolve_config()
    assert (resolved.decoder, resolved.threshold, resolved.editing_threshold,
            resolved.max_post_steps, resolved.num_to_transfer, resolved.block_length) == (
        "editing", 0.95, 0.9, 16, 1, 32)


@pytest.mark.parametrize("setting", [SETTINGS[0], (0.5, 0.0, 4, 1)])
def test_matches_the_float64_reference(checkpoint, engine, setting):
    """Prompts ending mid-block, on a block boundary, and after one token."""
    reference = ReferenceMoE(checkpoint)
    outs = engine.generate(PROMPTS, config_of(setting, gen_length=8, block_length=4,
                                              early_stop=False))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        run = llada21_generate(lambda ids: reference.logits(ids, 4), prompt, 8, 4, *setting)
        assert (out.token_ids, out.nfe) == (run.answer, run.forwards)
        assert (out.edited_tokens, out.post_steps) == (run.edited_tokens, run.post_steps)


@pytest.mark.parametrize(("setting", "block"), [(s, 8) for s in SETTINGS]
                         + [(SETTINGS[1], 4)])
def test_cache_equals_the_published_loop(engine, setting, block):
    """Mixed-length prompts in one batch, each row against the one-sequence loop."""
    prompts = mixed_prompts(5)
    outs = engine.generate(prompts, config_of(setting, gen_length=24, block_length=block,
                                              early_stop=False))
    for prompt, out in zip(prompts, outs, strict=True):
        run = llada21_generate(full_window(engine, block), prompt, 24, block, *setting)
        assert (out.token_ids, out.nfe, out.edited_tokens, out.post_steps) == (
            run.answer, run.forwards, run.edited_tokens, run.post_steps)


def test_the_settings_edit_and_refine(engine):
    """The settings above exercise both halves of the rule (else the tests prove little)."""
    prompts = mixed_prompts(6)
    for setting in SETTINGS[1:3]:
        outs = engine.generate(prompts, config_of(setting, gen_length=32, block_length=8))
        assert sum(o.edited_tokens for o in outs) > 0
        assert sum(o.post_steps for o in outs) > 0
    plain = engine.generate(prompts, config_of(SETTINGS[3], gen_length=32, block_length=8))
    assert all(o.post_steps == 0 for o in plain)


@pytest.mark.parametrize("setting", SETTINGS[1:3])
def test_early_stop_gives_the_published_answer(engine, setting):
    """The published loop stops after the block where EOS first appears; so does ours
    (an EOS in the current block may still be edited away), with as many forwards."""
    prompts = [[5, 9, 12, 7], [20] * 9, [8, 8]]
    with stops_at(engine, 18):
        outs = engine.generate(prompts, config_of(setting, gen_length=32, block_length=8))
        for prompt, out in zip(prompts, outs, strict=True):
            run = llada21_generate(full_window(engine, 8), prompt, 32, 8, *setting,
                                   eos_id=EOS_ID)
            assert out.finish_reason == "stop"
            assert out.token_ids == until_eos(run.answer)
            assert (out.nfe, out.edited_tokens, out.post_steps) == (
                run.forwards, run.edited_tokens, run.post_steps)


@pytest.mark.parametrize("fields", [
    dict(gen_length=16, block_length=4, threshold=0.5, editing_threshold=0.0),
    dict(gen_length=16, block_length=8, preset="quality", temperature=1.0, seed=3),
    dict(gen_length=16, block_length=4, preset="speed", top_k=5, temperature=0.8, seed=1),
], ids=["greedy", "sampled-quality", "sampled-speed-top-k"])
def test_batch_invariance(engine, fields):
    config, prompts = GenerationConfig(decoder="editing", **fields), mixed_prompts(12)
    with stops_at(engine, 18):
        alone = [engine.generate([p], config)[0] for p in prompts]
        together = engine.generate(prompts, config)
        rolling = engine.generate(prompts, dataclasses.replace(config, max_batch_size=5))
    assert "stop" in {o.finish_reason for o in alone}  # early stop is in play
    for one, in_batch, in_rolling in zip(alone, together, rolling, strict=True):
        assert in_batch.token_ids == one.token_ids == in_rolling.token_ids
        assert in_batch.nfe == one.nfe == in_rolling.nfe
        assert in_batch.edited_tokens == one.edited_tokens == in_rolling.edited_tokens


@pytest.mark.parametrize("setting", [SETTINGS[1], SETTINGS[4]])
def test_dense_llada_without_cache_matches_the_loop(tiny_engine, setting):
    """Bidirectional blocks counted from the prompt's end, the whole sequence each step."""
    prompts = mixed_prompts(5)

    def forward(ids: torch.Tensor) -> torch.Tensor:
        return tiny_engine.model(ids[None]).logits[0]

    outs = tiny_engine.generate(prompts, config_of(setting, gen_length=16, block_length=8,
                                                   cache="none", early_stop=False))
    for prompt, out in zip(prompts, outs, strict=True):
        run = llada21_generate(forward, prompt, 16, 8, *setting, absolute_grid=False)
        assert (out.token_ids, out.nfe, out.edited_tokens, out.post_steps) == (
            run.answer, run.forwards, run.edited_tokens, run.post_steps)


@pytest.mark.parametrize("cache", ["prefix", "dual", "vicinity"])
def test_dense_llada_caches_are_batch_invariant(tiny_engine, cache):
    config = GenerationConfig(decoder="editing", preset="speed", gen_length=16,
                              block_length=8, cache=cache, prefix_look=2, after_look=2)
    prompts = mixed_prompts(12)
    alone = [tiny_engine.generate([p], config)[0] for p in prompts]
    together = tiny_engine.generate(prompts, dataclasses.replace(config, max_batch_size=5))
    for one, in_batch in zip(alone, together, strict=True):
        assert (in_batch.token_ids, in_batch.nfe, in_batch.post_steps) == (
            one.token_ids, one.nfe, one.post_steps)


def test_presets_fill_what_the_caller_leaves_unset(engine):
    speed = engine.resolve_config(GenerationConfig(preset="speed"))
    assert {name: getattr(speed, name) for name in PRESETS["speed"]} == PRESETS["speed"]
    mine = engine.resolve_config(GenerationConfig(preset="quality", threshold=0.8))
    assert (mine.decoder, mine.threshold, mine.editing_threshold) == ("editing", 0.8, 0.5)
    # a checkpoint's preset gives way to a decoder the caller chooses
    model = {"preset": "speed", "threshold": 0.95}
    assert GenerationConfig().resolve(model).threshold == 0.5
    assert GenerationConfig(decoder="threshold").resolve(model).threshold == 0.95
    # the other decoders' results carry no editing counts
    out = engine.generate([[5, 6]], GenerationConfig(decoder="threshold", gen_length=8,
                                                     block_length=4))[0]
    assert (out.edited_tokens, out.post_steps) == (None, None)


@pytest.mark.parametrize(("fields", "message"), [
    (dict(preset="fast"), "unknown preset 'fast'"),
    (dict(preset="speed", decoder="credit"), "preset 'speed' is the editing decoder's"),
    (dict(editing_threshold=1.5), "editing_threshold must be in [0, 1]"),
    (dict(max_post_steps=-1), "max_post_steps must be an integer >= 0"),
    (dict(num_to_transfer=0), "num_to_transfer must be an integer >= 1"),
])
def test_editing_options_are_validated(engine, fields, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        engine.generate([[5]], GenerationConfig(**fields))


def test_service_params_carry_the_editing_fields():
    checked = params.check_params({"decoder": "editing", "preset": "quality",
                                   "editing_threshold": 0.25, "max_post_steps": 0,
                                   "num_to_transfer": 2})
    resolved = GenerationConfig(**params.engine_fields(checked)).resolve({})
    assert (resolved.threshold, resolved.editing_threshold, resolved.max_post_steps,
            resolved.num_to_transfer) == (0.7, 0.25, 0, 2)
    for bad in ({"preset": "turbo"}, {"editing_threshold": -0.1}, {"max_post_steps": 1.5},
                {"num_to_transfer": 0}):
        with pytest.raises(params.InvalidParam, match=next(iter(bad))):
            params.check_params(bad)


def test_the_command_line_shows_the_family_and_its_default_decoder(checkpoint, tmp_path):
    result = CliRunner().invoke(main, ["model", str(checkpoint)])
    assert result.exit_code == 0, result.output
    assert "family   LLaDA2.1" in result.output
    assert ("decoder  editing (threshold 0.95, editing_threshold 0.9, max_post_steps 16, "
            "num_to_transfer 1; blocks of 32, 128 tokens)") in result.output
    # the checkpoint's generation_config.json over the family's defaults, as the engine
    shutil.copytree(checkpoint, tmp_path / "speedy")
    (tmp_path / "speedy" / "generation_config.json").write_text('{"preset": "speed"}')
    shown = json.loads(CliRunner().invoke(main, ["model", str(tmp_path / "speedy"),
                                                 "--json"]).output)
    assert (shown["family"], shown["defaults"]["threshold"]) == ("LLaDA2.1", 0.5)
    assert shown["defaults"] == dataclasses.asdict(
        Engine.from_pretrained(tmp_path / "speedy").resolve_config())
    llada2 = json.loads((checkpoint / "config.json").read_text()) | {"model_type": "llada2_moe"}
    (tmp_path / "speedy" / "config.json").write_text(json.dumps(llada2))
    result = CliRunner().invoke(main, ["model", str(tmp_path / "speedy")])
    assert "family   LLaDA2\n" in result.output and "decoder  editing" in result.output
