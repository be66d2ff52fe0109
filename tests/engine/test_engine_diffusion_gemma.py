"""DiffusionGemma (docs/adr/027-diffusion-gemma.md): the tests' slow reference equals
transformers' `generate`; the engine equals both, at batch size 1 and in mixed batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.diffusion_gemma_reference import Settings, reference_generate
from tests.engine_requests import asked
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma
from tests.tiny_model import EOS_ID, PAD_ID

SHAPES = ("small", "moe")
MAX_NEW = 24  # three canvases of 8


def prompt_for(seed: int) -> list[int]:
    """Prompts longer than the sliding window (5), of different lengths."""
    return [4 + (seed * 7 + i * 3) % 40 for i in range(6 + seed % 5)]


@pytest.fixture(scope="module", params=SHAPES)
def checkpoint(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp(request.param),
                                      shape=request.param)


@pytest.fixture(scope="module")
def hf_model(checkpoint: Path) -> Any:
    from transformers import DiffusionGemmaForBlockDiffusion
    return DiffusionGemmaForBlockDiffusion.from_pretrained(checkpoint).eval()


def settings(checkpoint: Path) -> Settings:
    return Settings.from_generation_config(
        json.loads((checkpoint / "generation_config.json").read_text()))


def hf_generate(model: Any, prompt: list[int], seed: int) -> tuple[list[int], float]:
    torch.manual_seed(seed)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW)
    return out.sequences[0, len(prompt):].tolist(), float(out.tokens_per_forward[0])


def test_reference_equals_transformers_generate(checkpoint: Path, hf_model: Any) -> None:
    ended_inside, stopped_early = 0, 0
    for seed in range(4):
        prompt = prompt_for(seed)
        expected, per_forward = hf_generate(hf_model, prompt, seed)
        tokens, forwards = reference_generate(hf_model, prompt, seed, settings(checkpoint),
                                              MAX_NEW, EOS_ID, PAD_ID)
        assert tokens == expected
        assert sum(t != PAD_ID for t in tokens) / forwards == pytest.approx(per_forward)
        ended_inside += EOS_ID in tokens and tokens[-1] == PAD_ID
        stopped_early += forwards % settings(checkpoint).max_denoising_steps != 0
    assert ended_inside and stopped_early  # the cases the fidelity tests rely on occur


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> Any:
    from dinfer_engine import Engine
    return Engine.from_pretrained(checkpoint)


def run_rows(engine: Any, prompts: list[list[int]], seeds: list[int],
             max_batch_size: int = 64) -> list[Any]:
    """The generation loop's finished rows (whole canvases, pad after EOS), in order."""
    from dinfer_engine import loop
    from dinfer_engine.batch import Request
    from dinfer_engine.generation_config import GenerationConfig

    config = engine.resolve_config(GenerationConfig(gen_length=MAX_NEW,
                                                    max_batch_size=max_batch_size))
    requests = [Request(i, p, s)
                for i, (p, s) in enumerate(zip(prompts, seeds, strict=True))]
    rows: dict[int, Any] = {}
    loop.run(engine.model, requests, config, engine.stop_ids,
                           lambda row: rows.__setitem__(row.request.index, row))
    return [rows[i] for i in range(len(prompts))]


def test_engine_equals_transformers_generate_at_batch_size_1(engine: Any, hf_model: Any
                                                             ) -> None:
    for seed in range(4):
        prompt = prompt_for(seed)
        expected, per_forward = hf_generate(hf_model, prompt, seed)
        [row] = run_rows(engine, [prompt], [seed])
        assert row.answer == expected
        assert sum(t != PAD_ID for t in row.answer) / row.nfe == pytest.approx(per_forward)


def test_torchs_own_draws_give_the_same_answers(engine: Any, hf_model: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The path a CUDA generator takes (torch's exponential_ over every position, ADR
    038) equals transformers too, in a mixed batch."""
    from dinfer_engine.canvas import exponential

    monkeypatch.setattr(exponential, "stream", lambda generator: None)
    seeds = [0, 1, 2]
    rows = run_rows(engine, [prompt_for(s) for s in seeds], seeds)
    assert [row.answer for row in rows] == [hf_generate(hf_model, prompt_for(s), s)[0]
                                            for s in seeds]


def test_mixed_batch_rows_equal_their_batch_size_1_runs(engine: Any) -> None:
    seeds = [0, 1, 2, 3, 4, 5, 6]
    prompts = [prompt_for(s) for s in seeds]
    alone = [run_rows(engine, [p], [s])[0].answer for p, s in zip(prompts, seeds,
                                                                   strict=True)]
    together = [row.answer for row in run_rows(engine, prompts, seeds)]
    assert together == alone
    # rows leave and waiting ones join mid-run
    assert [row.answer for row in run_rows(engine, prompts, seeds, max_batch_size=3)] == alone


def test_engine_generate_ends_answers_at_eos(engine: Any, checkpoint: Path) -> None:
    from dinfer_engine.generation_config import GenerationConfig

    seeds = list(range(6))
    prompts = [prompt_for(s) for s in seeds]
    rows = run_rows(engine, prompts, seeds)
    results = engine.generate(asked(prompts, seeds=seeds), GenerationConfig(gen_length=MAX_NEW))
    assert any(r.finish_reason == "stop" for r in results)
    for row, result in zip(rows, results, strict=True):
        stop = row.answer.index(EOS_ID) if EOS_ID in row.answer else len(row.answer)
        assert result.token_ids == row.answer[:stop]
        assert result.finish_reason == ("stop" if stop < len(row.answer) else "length")
        assert result.nfe == row.nfe


@pytest.mark.parametrize("field, value", [("decoder", "threshold"), ("cache", "dual"),
                                          ("block_length", 8), ("steps", 4),
                                          ("temperature", 0.7), ("preset", "speed")])
def test_masked_diffusion_fields_are_refused_naming_them(engine: Any, field: str,
                                                         value: Any) -> None:
    from dinfer_engine.generation_config import GenerationConfig

    with pytest.raises(ValueError, match=f"^{field} does not apply to DiffusionGemma"):
        engine.generate(["ab"], GenerationConfig(**{field: value}))


def test_infill_is_refused(engine: Any) -> None:
    from dinfer_engine import Infill

    with pytest.raises(ValueError, match="prompt 0: infill needs a bidirectional model"):
        engine.generate([Infill(("ab", "cd"))])


def test_generation_config_fields_come_from_the_checkpoint(engine: Any) -> None:
    config = engine.resolve_config()
    assert (config.max_denoising_steps, config.entropy_bound, config.t_min, config.t_max,
            config.stability_threshold, config.confidence_threshold) == (
        10, 0.5, 0.4, 0.8, 1, 0.1)


def test_answers_keep_gen_length_when_it_is_not_whole_canvases(engine: Any) -> None:
    from dinfer_engine.generation_config import GenerationConfig

    prompts = [prompt_for(s) for s in range(6)]
    results = engine.generate(asked(prompts, seeds=list(range(6))), GenerationConfig(gen_length=11,
                                                                                     early_stop=False))
    rows = run_rows(engine, prompts, list(range(6)))  # 24 tokens: the same first canvases
    for row, result in zip(rows, results, strict=True):
        assert result.token_ids == row.answer[:11]
