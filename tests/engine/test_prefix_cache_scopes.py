"""Prefix cache scopes (dinfer_engine/cache_scope.py, docs/adr/040-prefix-cache-owners.md):
a prompt reuses only its own scope's blocks, in one batch and across calls, and another
scope's identical prompt runs as a fresh one (same tokens, forwards and counts); a salt
splits one account; the budget is shared fairly, so an account flooding distinct prompts
evicts its own blocks, not another's template. LLaDA2 on one and two ranks, and
DiffusionGemma's encoder cache."""

from __future__ import annotations

import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.cache_scope import CacheScope
from tests.engine.test_engine_prefix_cache import BIG, cached
from tests.engine_requests import asked
from tests.tensor_parallel_models import write_family
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma
from tests.tiny_moe import write_tiny_moe

A, B = CacheScope("owner-a"), CacheScope("owner-b")
CONFIG = GenerationConfig(gen_length=8, block_length=4)
TEMPLATE = list(range(5, 29))  # 6 whole blocks of 4


def distinct(i: int) -> list[int]:
    """The i-th of prompts of 3 whole blocks that share no block with each other."""
    return [5 + (i + 3 * j) % 35 for j in range(12)] + [40]


def reused(results: list) -> list[int | None]:
    return [r.prefix_tokens_reused for r in results]


@pytest.fixture(scope="module")
def llada2(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_tiny_moe(tmp_path_factory.mktemp("scopes") / "m",
                                                 "llada2"))


def test_another_scopes_identical_prompt_runs_as_a_fresh_one(llada2):
    prompts = [TEMPLATE + [30 + i] for i in range(3)]
    fresh = cached(llada2).generate(asked(prompts, scopes=[B] * 3), CONFIG)
    on = cached(llada2)
    on.generate(asked(prompts, scopes=[A] * 3), CONFIG)
    other = on.generate(asked(prompts, scopes=[B] * 3), CONFIG)
    for got, want in zip(other, fresh, strict=True):
        assert (got.token_ids, got.nfe, got.prefix_tokens_reused) == (
            want.token_ids, want.nfe, want.prefix_tokens_reused)
    assert reused(other) == [0, 24, 24]  # B's rows share B's blocks, not A's
    assert reused(on.generate(asked(prompts, scopes=[A] * 3), CONFIG)) == [24] * 3


def test_rows_of_two_scopes_in_one_batch_do_not_share(llada2):
    on = cached(llada2)
    results = on.generate(asked([TEMPLATE + [30], TEMPLATE + [31], TEMPLATE + [32]],
                                scopes=[A, B, A]), CONFIG)
    assert reused(results) == [0, 0, 24]
    assert on.prefix_cache_stats()["prefix_cache_blocks"] == 12


def test_a_salt_splits_one_account_and_equal_scopes_share(llada2):
    on, prompt = cached(llada2), [TEMPLATE + [30]]
    on.generate(asked(prompt, scopes=[CacheScope("owner-a", "alice")]), CONFIG)
    assert reused(on.generate(asked(prompt, scopes=[CacheScope("owner-a", "bob")]), CONFIG)) == [0]
    assert reused(on.generate(asked(prompt, scopes=[CacheScope("owner-a")]), CONFIG)) == [0]
    assert reused(on.generate(asked(prompt, scopes=[CacheScope("owner-a", "alice")]),
                              CONFIG)) == [24]
    # fields are length-prefixed: ("ab", "c") is not ("a", "bc")
    assert CacheScope("ab", "c").seed(4) != CacheScope("a", "bc").seed(4)


def test_an_account_flooding_distinct_prompts_evicts_its_own_blocks(llada2):
    """A budget of 12 blocks: B's template holds 6; A floods 10 distinct prompts of 3
    blocks. A evicts its own blocks (B holds less than half), and B's template is reused
    whole afterwards, as with no flood."""
    block_bytes = 4 * llada2.model.kv_token_bytes()
    on = cached(llada2, 12 * block_bytes)
    template = [TEMPLATE + [30]]
    on.generate(asked(template, scopes=[B]), CONFIG)
    idle = reused(on.generate(asked(template, scopes=[B]), CONFIG))
    for i in range(10):
        on.generate(asked([distinct(i)], scopes=[A]), CONFIG)
    assert on.prefix.held_by("owner-b") == 6 * block_bytes
    assert on.prefix.held_by("owner-a") == 6 * block_bytes
    assert reused(on.generate(asked(template, scopes=[B]), CONFIG)) == idle == [24]
    # one account alone still evicts least recently used first, up to the whole budget
    for i in range(10):
        on.generate(asked([distinct(i + 10)], scopes=[B]), CONFIG)
    assert on.prefix.held_by("owner-b") + on.prefix.held_by("owner-a") == 12 * block_bytes
    assert on.prefix.held_by("owner-b") >= 6 * block_bytes


def test_tensor_parallel_ranks_follow_the_scopes(tmp_path):
    path = write_family(tmp_path / "llada2", "llada2")
    one = Engine.from_pretrained(path)
    prompts = [TEMPLATE + [30 + i] for i in range(4)]
    config = GenerationConfig(gen_length=8, block_length=4, max_batch_size=4)
    expected = [r.token_ids for r in one.generate(prompts, config)]
    budget = 12 * 4 * one.model.kv_token_bytes()
    with Engine.from_pretrained(path, tensor_parallel=2, prefix_cache_bytes=budget) as two:
        first = two.generate(asked(prompts, scopes=[A] * 4), config)
        other = two.generate(asked(prompts, scopes=[B] * 4), config)
        again = two.generate(asked(prompts, scopes=[A] * 4), config)
    for results in (first, other, again):
        assert [r.token_ids for r in results] == expected
    assert reused(first) == reused(other) == [0, 24, 24, 24]
    assert reused(again) == [24] * 4


def test_diffusion_gemmas_encoder_cache_follows_the_scopes(tmp_path):
    on = Engine.from_pretrained(write_tiny_diffusion_gemma(tmp_path / "dg"),
                                prefix_cache_bytes=BIG)
    prompt = [[4 + (i * 5) % 40 for i in range(70)]]  # two whole blocks of 32
    config = GenerationConfig(gen_length=16)
    fresh = on.generate(asked(prompt, seeds=[1], scopes=[A]), config)
    other = on.generate(asked(prompt, seeds=[1], scopes=[B]), config)
    assert reused(fresh) == reused(other) == [0]
    assert other[0].token_ids == fresh[0].token_ids
    assert reused(on.generate(asked(prompt, seeds=[1], scopes=[A]), config)) == [64]


def test_compiled_constraints_are_kept_per_scope(llada2):
    """One scope's compile is never another's cache hit (a hit would be seen in timing)."""
    from dinfer_engine.constraints.spec import ConstraintSpec, _grammar

    engine = cached(llada2)
    spec = ConstraintSpec.regex("[ab]+")
    converted = _grammar.cache_info().misses
    for scope in ("owner:a", "owner:b", "owner:a"):
        engine.compile(ConstraintSpec(spec.kind, spec.source, scope))
    assert engine.constraints.compiles == 2
    assert _grammar.cache_info().misses == converted + 2  # its grammar text too
    assert ConstraintSpec(spec.kind, spec.source).digest == spec.digest  # unscoped: as before
