"""Which DiffusionGemma canvases make their step's draws and self-conditioning product
(docs/adr/054-draws-nobody-reads.md): draws every canvas at every step, but a row's last
canvas at the step that ends it, whose samples, noise and generator nothing reads again;
the product every canvas at every step but the one that ends it; the answers stay
transformers'."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

from dinfer_engine import loop, uniform_generation
from dinfer_engine.batch import Request
from dinfer_engine.canvas import uniform
from dinfer_engine.generation_config import GenerationConfig
from tests.engine.test_engine_diffusion_gemma import MAX_NEW, hf_generate, prompt_for
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

CANVAS = 8  # the tiny checkpoint's canvas_length
SEEDS = range(8)  # rows ending at a stop token, early (stable and confident), at 10 steps


@pytest.mark.parametrize("gen_length", [MAX_NEW, CANVAS])
def test_a_rows_last_canvas_makes_no_draws_at_the_step_that_ends_it(
        gen_length: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One batch: each row's earlier canvases draw at each of their steps, its last canvas
    (the third, or the only one) at all but the step that ends it, its last or an earlier
    one; the self-conditioning product is made at every step of a canvas but the one
    that ends it (nothing reads it); every answer is transformers' (its first
    gen_length tokens)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from dinfer_engine import Engine

    directory = write_tiny_diffusion_gemma(tmp_path, shape="moe")
    engine: Any = Engine.from_pretrained(directory)
    reference = DiffusionGemmaForBlockDiffusion.from_pretrained(directory).eval()
    steps: Counter[uniform.UniformNoiseCanvas] = Counter()
    draws: Counter[uniform.UniformNoiseCanvas] = Counter()
    rows: defaultdict[torch.Generator, list[uniform.UniformNoiseCanvas]] = defaultdict(list)

    def counted_step(canvases: list[uniform.UniformNoiseCanvas], *args: Any) -> Any:
        for canvas in canvases:
            if canvas not in steps:
                rows[canvas.generator].append(canvas)
            steps[canvas] += 1
        return uniform.step(canvases, *args)

    def counted_draws(canvas: uniform.UniformNoiseCanvas, *args: Any) -> torch.Tensor:
        draws[canvas] += 1
        return exponential_draws(canvas, *args)

    def counted_product(model: Any, probs: torch.Tensor) -> torch.Tensor:
        products.append(len(probs))
        return expected_embedding(model, probs)

    exponential_draws = uniform.exponential_draws
    expected_embedding = uniform_generation.expected_embedding
    products: list[int] = []
    monkeypatch.setattr(uniform_generation, "step", counted_step)
    monkeypatch.setattr(uniform_generation, "expected_embedding", counted_product)
    monkeypatch.setattr(uniform, "exponential_draws", counted_draws)
    config = engine.resolve_config(GenerationConfig(gen_length=gen_length))
    answers: dict[int, list[int]] = {}
    loop.run(
        engine.model, [Request(s, prompt_for(s), s)
                       for s in SEEDS], config, engine.stop_ids,
        lambda row: answers.__setitem__(row.request.index, row.answer))
    assert [answers[s] for s in SEEDS] == \
        [hf_generate(reference, prompt_for(s), s)[0][:gen_length] for s in SEEDS]
    for canvases in rows.values():
        assert [canvas.final for canvas in canvases] == \
            [i == gen_length // CANVAS - 1 for i in range(len(canvases))]
        assert [draws[canvas] for canvas in canvases] == \
            [steps[canvas] - canvas.final for canvas in canvases]
    assert sum(products) == sum(count - 1 for count in steps.values())
    last = [canvases[-1] for canvases in rows.values() if canvases[-1].final]
    assert last
    if gen_length == CANVAS:  # last canvases that end at their last step and earlier
        assert {steps[canvas] == config.max_denoising_steps for canvas in last} == \
            {True, False}
