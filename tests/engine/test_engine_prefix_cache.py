"""The prompt prefix cache of block diffusion (dinfer_engine/prefix_cache.py): every row's tokens
and forwards are the same with the cache and without it, in batches mixing shared and
distinct prefixes, prefixes ending inside a block, rolling batches and several generate
calls on one engine, for every decoder of LLaDA2 / LLaDA2.1; each shared block is
computed once; the budget evicts; bidirectional families share nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig
from tests.engine.test_engine_batching import stops_at
from tests.tensor_parallel_models import write_family
from tests.tiny_moe import write_tiny_moe

BIG = 1 << 30


def shared_prompts(block: int) -> list[list[int]]:
    """Rows sharing a prefix of 3 whole blocks and a bit (tails of several lengths), rows
    sharing only its first block, rows equal to whole blocks of it, distinct rows, and
    rows shorter than a block."""
    generator = torch.Generator().manual_seed(1)

    def tokens(n: int) -> list[int]:
        return torch.randint(5, 40, (n,), generator=generator).tolist()

    prefix = tokens(3 * block + 1)
    return [prefix + tokens(1), tokens(2 * block + 3), prefix + tokens(block + 2), prefix,
            prefix[:block] + tokens(block + 1), prefix[:3 * block], tokens(block - 1),
            prefix + tokens(1), prefix[:block] + tokens(2), tokens(3), prefix[:2 * block]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prefix")
    return {"llada2": write_tiny_moe(root / "llada2", "llada2"),
            "llada21": write_tiny_moe(root / "llada21", "llada2", model_type="llada21_moe"),
            "llada_moe": write_tiny_moe(root / "moe", "llada_moe")}


@pytest.fixture(scope="module")
def plain(checkpoints: dict[str, Path]) -> dict[str, Engine]:
    return {name: Engine.from_pretrained(path) for name, path in checkpoints.items()}


def cached(engine: Engine, budget: int = BIG) -> Engine:
    """An engine on the same model with a fresh prefix cache of `budget` bytes."""
    return Engine(engine.model, engine.tokenizer, engine.model_defaults,
                  prefix_cache_bytes=budget)


def whole_blocks(prompts: list[list[int]], block: int) -> list[tuple[int, ...]]:
    """Every row's whole prompt blocks, each named by the prefix it ends."""
    return [tuple(p[:end]) for p in prompts
            for end in range(block, len(p) // block * block + 1, block)]


CONFIGS = [
    ("llada2", GenerationConfig(gen_length=16, block_length=4, threshold=0.8)),
    ("llada2", GenerationConfig(gen_length=16, block_length=4, decoder="fixed", steps=8,
                                temperature=1.0, seed=3)),
    ("llada2", GenerationConfig(gen_length=16, block_length=4, decoder="credit",
                                threshold=0.8, smoothing=True)),
    ("llada2", GenerationConfig(gen_length=12, block_length=4, decoder="threshold",
                                threshold=0.9, logprobs=True, top_logprobs=2)),
    ("llada21", GenerationConfig(gen_length=16, block_length=4, decoder="editing",
                                 threshold=0.5, editing_threshold=0.0)),
    ("llada21", GenerationConfig(gen_length=16, block_length=4, preset="speed", top_k=5,
                                 temperature=0.8, seed=1)),
]
IDS = ["threshold", "fixed-sampled", "credit-smoothing", "logprobs", "editing",
       "editing-speed-sampled"]


@pytest.mark.parametrize(("name", "config"), CONFIGS, ids=IDS)
def test_tokens_equal_without_the_cache_and_each_block_is_computed_once(plain, name, config):
    block, engine = config.block_length, plain[name]
    on, prompts = cached(engine), shared_prompts(config.block_length)
    with stops_at(engine, 30):
        off = engine.generate(prompts, config)
        first = on.generate(prompts, config)  # one batch: each distinct block once
        again = on.generate(prompts, config)  # a later job: every whole block reused
        rolling = cached(engine).generate(prompts, dataclasses.replace(config,
                                                                       max_batch_size=3))
    for results in (first, again, rolling):
        for with_cache, without in zip(results, off, strict=True):
            assert with_cache.token_ids == without.token_ids
            assert with_cache.nfe == without.nfe
            # the same keys/values up to rounding (the forwards' shapes differ)
            assert with_cache.logprobs == (None if without.logprobs is None
                                           else pytest.approx(without.logprobs, abs=1e-5))
            assert with_cache.edited_tokens == without.edited_tokens
    assert all(r.prefix_tokens_reused is None for r in off)
    blocks = whole_blocks(prompts, block)
    assert sum(r.prefix_tokens_reused or 0 for r in first) == (
        len(blocks) - len(set(blocks))) * block
    assert [r.prefix_tokens_reused for r in again] == [len(p) // block * block for p in prompts]
    assert sum(r.prefix_tokens_reused or 0 for r in rolling) > 0
    stats = on.prefix_cache_stats()
    assert stats["prefix_cache_blocks"] == len(set(blocks))
    assert stats["prefix_tokens_reused"] == sum(r.prefix_tokens_reused or 0
                                                for r in first + again)


def written_columns(engine: Engine, prompts: list[list[int]], config: GenerationConfig
                    ) -> tuple[int, list[int]]:
    """The key/value columns the model's forwards computed and wrote during one generate
    call (filler columns of a right-aligned span are computed but not written), and how
    many rows each forward ran."""
    written, rows = [0], []

    def count(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        written[0] += int((kwargs["cache_columns"] >= 0).sum())
        rows.append(len(kwargs["cache_rows"]))

    hook = engine.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        engine.generate(prompts, config)
    finally:
        hook.remove()
    return written[0], rows


def test_rows_of_one_batch_wait_for_one_computation_of_a_shared_prefix(plain):
    """In one batch, rows sharing uncached whole blocks compute them once between them (one
    row's forward, the others copy its keys/values): the columns computed with the cache
    are those without it less every repeated whole block; 8 rows sharing a template of 6
    blocks take a forward of one row, then one of the 7 others after its blocks."""
    engine, config = plain["llada2"], GenerationConfig(gen_length=8, block_length=4,
                                                        decoder="fixed", steps=4)
    prompts = shared_prompts(4)
    blocks = whole_blocks(prompts, 4)
    without, _ = written_columns(engine, prompts, config)
    with_cache, _ = written_columns(cached(engine), prompts, config)
    assert without - with_cache == (len(blocks) - len(set(blocks))) * 4
    template = torch.arange(5, 29).tolist()
    rows = [template + [30 + i] for i in range(8)]
    without, forwards_without = written_columns(engine, rows, config)
    with_cache, forwards = written_columns(cached(engine), rows, config)
    assert without - with_cache == 7 * 24
    assert forwards_without[0] == 8
    assert forwards[:2] == [1, 7]  # the leader, then the rest after its 6 blocks
    assert forwards[2:] == forwards_without[1:]


def test_the_budget_evicts_least_recently_used_blocks(plain):
    engine, config = plain["llada2"], GenerationConfig(gen_length=8, block_length=4)
    block_bytes = 4 * engine.model.kv_token_bytes()
    on, prompts = cached(engine, 3 * block_bytes), shared_prompts(4)
    off = engine.generate(prompts, config)
    for _ in range(2):
        results = on.generate(prompts, config)
        assert [r.token_ids for r in results] == [r.token_ids for r in off]
    stats = on.prefix_cache_stats()
    assert stats["prefix_cache_bytes"] == 3 * block_bytes
    assert stats["prefix_cache_blocks"] == 3
    assert stats["prefix_blocks_evicted"] > 0
    # least recently used first, a block's prefix outliving the block: A's blocks a1 a2,
    # then B's b1 b2 evict a2; A reuses a1 and its a2 evicts b2; B reuses b1 and its b2
    # evicts a2
    a, b = list(range(5, 13)), list(range(13, 21))
    on = cached(engine, 3 * block_bytes)
    reused = [on.generate([p], config)[0].prefix_tokens_reused for p in (a, b, a, b)]
    assert reused == [0, 0, 4, 4]
    assert on.prefix_cache_stats()["prefix_blocks_evicted"] == 3


def test_a_budget_under_one_block_keeps_nothing(plain):
    engine, config = plain["llada2"], GenerationConfig(gen_length=8, block_length=4)
    on, prompts = cached(engine, 4 * engine.model.kv_token_bytes() - 1), shared_prompts(4)
    results = on.generate(prompts, config)
    assert [r.token_ids for r in results] == [r.token_ids
                                               for r in engine.generate(prompts, config)]
    assert {r.prefix_tokens_reused for r in results} == {0}
    assert on.prefix_cache_stats()["prefix_cache_bytes"] == 0


def test_bidirectional_models_share_nothing(plain):
    """A LLaDA-MoE prompt's keys/values depend on the answer after it: no cache."""
    on = cached(plain["llada_moe"])
    assert on.prefix is None
    results = on.generate(shared_prompts(4), GenerationConfig(gen_length=8, block_length=4))
    assert {r.prefix_tokens_reused for r in results} == {None}


def test_a_negative_budget_is_refused(plain):
    with pytest.raises(ValueError, match="budget must be >= 0"):
        cached(plain["llada2"], -1)


def test_tensor_parallel_ranks_share_the_same_blocks(tmp_path):
    """Each rank keeps its shard of the blocks, evicting as rank 0 does (the budget counts
    the whole model), so the ranks stay in step and tokens match one rank's."""
    path = write_family(tmp_path / "llada2", "llada2")
    one = Engine.from_pretrained(path)
    budget = 5 * 4 * one.model.kv_token_bytes()
    config = GenerationConfig(gen_length=8, block_length=4, max_batch_size=4)
    prompts = shared_prompts(4)
    expected = [r.token_ids for r in one.generate(prompts, config)]
    with Engine.from_pretrained(path, tensor_parallel=2, prefix_cache_bytes=budget) as two:
        for _ in range(2):
            results = two.generate(prompts, config)
            assert [r.token_ids for r in results] == expected
            assert sum(r.prefix_tokens_reused or 0 for r in results) > 0
        assert two.prefix_cache_stats()["prefix_blocks_evicted"] > 0
