"""DiffusionGemma's per-position work over tiles of positions
(docs/adr/050-step-in-cache.md): a tile's argmax, probabilities and entropies are the
reference's operations over the whole canvas, bit for bit, with one thread or several;
tiles of two positions give transformers' tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dinfer_engine.canvas import uniform_tiles as tiles
from tests.engine.test_engine_diffusion_gemma import hf_generate, prompt_for, run_rows
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

CPU = torch.device("cpu")


def test_tiles_cover_the_canvas_with_two_positions_at_least() -> None:
    for length in (1, 2, 3, 7, 8, 33, 256):
        for width in (10, 32_000, 262_144):
            bounds = tiles.tile_bounds(length, width, CPU)
            assert bounds[0][0] == 0 and bounds[-1][1] == length
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
            assert all(end - start >= min(length, tiles.MIN_TILE) for start, end in bounds)
            positions = max(tiles.MIN_TILE, tiles.TILE_BYTES // (4 * width))
            assert len(bounds) == max(1, length // positions)
    assert tiles.tile_bounds(256, 262_144, torch.device("meta")) == [(0, 256)]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_tiled_canvas_is_the_references_softmax_entropy_and_argmax(
        threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide enough that torch parallelises its reductions (the vocabulary past its grain
    size), with logits whose scaled range the subnormal floor leaves alone."""
    monkeypatch.setattr(tiles, "TILE_BYTES", 1)  # tiles of MIN_TILE positions
    generator = torch.Generator().manual_seed(threads)
    logits = 4 * torch.randn((9, 40_000), generator=generator)
    logits[3, 17] = logits[3, 5] = logits[3].max() + 1  # a tie: the first index wins
    temperature = torch.tensor(0.55)
    scaled = logits / temperature
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        bounds = tiles.tile_bounds(len(logits), logits.shape[1], CPU)
        assert len(bounds) == 4
        mine = logits.clone()
        best, entropy = tiles.decide(mine, temperature, logits.shape[1], bounds)
        last = tiles.argmax_only(logits.clone(), temperature, bounds)
        probs = torch.softmax(scaled, dim=-1)
        reference = torch.distributions.Categorical(logits=scaled).entropy()
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(best, scaled.argmax(-1)) and torch.equal(last, best)
    assert int(best[3]) == 5
    assert torch.equal(mine, probs)
    assert torch.equal(entropy, reference)


def test_tiles_of_two_positions_give_transformers_tokens(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A batch whose rows leave at different steps, every canvas cut into tiles of two
    positions: each row is transformers' `generate`."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from dinfer_engine import Engine

    directory = write_tiny_diffusion_gemma(tmp_path, shape="moe")
    engine: Any = Engine.from_pretrained(directory)
    reference = DiffusionGemmaForBlockDiffusion.from_pretrained(directory).eval()
    seeds = list(range(5))
    prompts = [prompt_for(s) for s in seeds]
    expected = [hf_generate(reference, p, s)[0] for p, s in zip(prompts, seeds, strict=True)]
    monkeypatch.setattr(tiles, "TILE_BYTES", 1)
    assert [row.answer for row in run_rows(engine, prompts, seeds)] == expected
