"""DiffusionGemma's batched encoder (dinfer_engine/models/diffusion_gemma.py `encode_rows`,
dinfer_engine/encoder_prefix.py `encode_prompts`): caches built for several rows in one forward
are the same bits as built row by row, for prompts of different lengths (longer than the
sliding window, across query blocks), several canvases committed by changing sets of
rows, and prompts joining together that share prefixes (the same reuse as one after the
other)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.engine.test_diffusion_gemma_prefix import PROMPTS
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

SHAPES = {"small": {}, "moe": {"shape": "moe"},
          "window-over-a-block": {"shape": "moe", "sliding_window": 48}}
LENGTHS = (70, 3, 33, 100, 1, 64)
# the rows committing a canvas, one forward each: their positions and caches drift apart
COMMITS = ((0, 1, 2, 3, 4, 5), (0, 2, 3), (1, 3, 4, 5), (3,), (5, 0))
CPU = torch.device("cpu")


def tokens(seed: int, length: int) -> list[int]:
    return [4 + (seed * 13 + i * 7) % 40 for i in range(length)]


@pytest.fixture(scope="module", params=list(SHAPES))
def directory(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp(request.param),
                                      **SHAPES[request.param])


def engine(directory: Any, budget: int = 0) -> Any:
    from dinfer_engine import Engine
    return Engine.from_pretrained(directory, prefix_cache_bytes=budget)


def assert_same(caches: list[Any], expected: list[Any]) -> None:
    assert len(caches) == len(expected)
    for row, (cache, other) in enumerate(zip(caches, expected, strict=True)):
        assert len(cache) == len(other), row
        for layer, ((k, v), (k2, v2)) in enumerate(zip(cache, other, strict=True)):
            assert torch.equal(k, k2) and torch.equal(v, v2), (row, layer)


@torch.inference_mode()
def test_caches_built_in_one_forward_equal_caches_built_row_by_row(directory: Any) -> None:
    model = engine(directory).model
    length = model.config.canvas_length
    alone: list[Any] = [[] for _ in LENGTHS]
    batched: list[Any] = [[] for _ in LENGTHS]
    for cache, (seed, n) in zip(alone, enumerate(LENGTHS), strict=True):
        model.encode(cache, torch.tensor([tokens(seed, n)]), 0)
    model.encode_rows(batched, [torch.tensor(tokens(s, n)) for s, n in enumerate(LENGTHS)],
                      [0] * len(LENGTHS))
    assert_same(batched, alone)
    committed = list(LENGTHS)
    for canvas, rows in enumerate(COMMITS):
        ids = [torch.tensor(tokens(100 + 10 * canvas + r, length)) for r in rows]
        new = [model.encode(alone[r], t[None], committed[r]) for r, t in zip(rows, ids,
                                                                               strict=True)]
        assert_same(model.encode_rows([batched[r] for r in rows], ids,
                                      [committed[r] for r in rows]), new)
        for r in rows:
            committed[r] += length
        assert_same(batched, alone)


@torch.inference_mode()
@pytest.mark.parametrize("budget", [0, 1 << 30])
def test_prompts_joining_together_encode_as_one_after_the_other(directory: Any,
                                                                budget: int) -> None:
    from dinfer_engine.encoder_prefix import encode_prompt, encode_prompts

    one, together = engine(directory, budget), engine(directory, budget)
    prompts = PROMPTS + [tokens(9, 40)] + PROMPTS[:2]
    expected = [encode_prompt(one.model, p, one.prefix, CPU) for p in prompts]
    encoded = encode_prompts(together.model, prompts, together.prefix, CPU)
    assert [reused for _, reused in encoded] == [reused for _, reused in expected]
    assert_same([cache for cache, _ in encoded], [cache for cache, _ in expected])
    assert together.prefix_cache_stats() == one.prefix_cache_stats()
