"""DiffusionGemma's prompt prefix share (docs/adr/034-fixed-grid.md): a row's encoder
cache and tokens are the same with the prefix cache on and off, for shared and distinct
prefixes, prefixes ending inside a block, whole prompts found in the cache, several
calls on one engine; the budget evicts."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.engine_requests import asked
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

SHAPES = {"small": {}, "moe": {"shape": "moe"},
          "window-over-a-block": {"shape": "moe", "sliding_window": 48}}
BLOCK = 32


def tokens(seed: int, length: int) -> list[int]:
    return [4 + (seed * 11 + i * 5) % 40 for i in range(length)]


SHARED = tokens(0, 2 * BLOCK + 13)  # two whole blocks, then 13 tokens inside the third
PROMPTS = [SHARED + tokens(1, 9), SHARED + tokens(2, 70), SHARED[:40] + tokens(3, 30),
           tokens(4, 100), SHARED[:2 * BLOCK], SHARED + tokens(1, 9), tokens(5, 12)]


@pytest.fixture(scope="module", params=list(SHAPES))
def directory(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp(request.param),
                                      **SHAPES[request.param])


def engine(directory: Any, budget: int) -> Any:
    from dinfer_engine import Engine
    return Engine.from_pretrained(directory, prefix_cache_bytes=budget)


def generate(engine: Any, prompts: list[list[int]], max_batch_size: int = 64
             ) -> list[Any]:
    from dinfer_engine.generation_config import GenerationConfig
    return engine.generate(asked(prompts, seeds=list(range(len(prompts)))),
                           GenerationConfig(gen_length=16,
                                                     max_batch_size=max_batch_size))


@torch.inference_mode()
def test_encoder_caches_are_the_same_bits_with_and_without_the_prefix_cache(
        directory: Any) -> None:
    from dinfer_engine.encoder_prefix import encode_prompt

    cached = engine(directory, 1 << 30)
    for prompt in PROMPTS + PROMPTS:
        alone, _ = encode_prompt(cached.model, prompt, None, torch.device("cpu"))
        shared, _ = encode_prompt(cached.model, prompt, cached.prefix, torch.device("cpu"))
        assert len(shared) == len(alone)
        for (k, v), (k2, v2) in zip(alone, shared, strict=True):
            assert torch.equal(k, k2) and torch.equal(v, v2)
    assert cached.prefix.reused_tokens > 0


def test_tokens_are_the_same_with_and_without_the_cache_over_several_calls(
        directory: Any) -> None:
    plain, cached = engine(directory, 0), engine(directory, 1 << 30)
    expected = [r.token_ids for r in generate(plain, PROMPTS)]
    first = generate(cached, PROMPTS, max_batch_size=3)
    assert [r.token_ids for r in first] == expected
    # in one call: each shared whole block is encoded by the first row holding it
    assert [r.prefix_tokens_reused for r in first] == [0, 64, 32, 0, 64, 64, 0]
    again = generate(cached, PROMPTS)
    assert [r.token_ids for r in again] == expected
    assert [r.prefix_tokens_reused for r in again] == [64, 128, 64, 96, 64, 64, 0]
    assert all(r.prefix_tokens_reused is None for r in generate(plain, PROMPTS[:1]))


def test_the_budget_evicts_least_recently_used_blocks(directory: Any) -> None:

    plain = engine(directory, 0)
    small = engine(directory, 3 * BLOCK * plain.model.kv_token_bytes())
    assert [r.token_ids for r in generate(small, PROMPTS)] == \
        [r.token_ids for r in generate(plain, PROMPTS)]
    stats = small.prefix_cache_stats()
    assert stats["prefix_cache_blocks"] == 3 and stats["prefix_blocks_evicted"] > 0
    assert stats["prefix_cache_bytes"] <= small.prefix.budget
