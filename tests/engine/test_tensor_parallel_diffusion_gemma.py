"""DiffusionGemma under tensor parallelism (dinfer_engine/parallel/, docs/adr/037): 2 gloo ranks
on the CPU, fp32, against the one-rank engine on the same tiny checkpoints (dense-and-MoE
"small": 1 key/value head on its full layer, replicated at 2 ranks; "moe": 4 experts, top
2). Answers, finish reasons and forwards are identical, with the two-rank engine sharing
prompt prefixes too (ADR 034), within a prompt's scope (ADR 040); each rank holds its
slices, its products on the fixed grid."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.loading.checkpoint import load_model
from dinfer_engine.models import fixed_grid
from dinfer_engine.parallel.group import Group
from dinfer_engine.parallel.layers import RowParallelLinear
from tests.engine_requests import asked
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

VOCAB = 48  # beyond the tokenizer's 45 ids: divides by 2 ranks
SHAPES = ("small", "moe")
SPLIT = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
         "experts", "embed_tokens"}  # the modules whose parameters split


def prompts() -> list[list[int]]:
    """Longer than the sliding window (5), of different lengths."""
    return [[4 + (seed * 7 + i * 3) % 40 for i in range(6 + seed % 5)] for seed in range(6)]


def write(directory: Path, shape: str) -> Path:
    """Weights of seed 2: on these prompts a one-rank fp64 run gives the fp32 answers, so
    no token sits at a near-tie that summing in another order could flip (with seed 0's
    MoE weights one row does: its third canvas differs between fp32 and fp64)."""
    return write_tiny_diffusion_gemma(directory, shape=shape, seed=2, vocab_size=VOCAB)


@pytest.fixture(scope="module", params=SHAPES)
def pair(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    path = write(tmp_path_factory.mktemp("dg_tp") / request.param, request.param)
    with Engine.from_pretrained(path, tensor_parallel=2, prefix_cache_bytes=2**24) as parallel:
        yield Engine.from_pretrained(path), parallel


def test_answers_are_token_identical_to_one_rank(pair: tuple[Engine, Engine]) -> None:
    one, two = pair
    seeds = list(range(6))
    for batch in (64, 3):  # all together; rows leaving and joining mid-run
        config = GenerationConfig(gen_length=24, max_batch_size=batch)
        expected = one.generate(asked(prompts(), seeds=seeds), config)
        got = two.generate(asked(prompts(), seeds=seeds), config)
        assert [(r.token_ids, r.finish_reason, r.nfe) for r in got] == \
            [(r.token_ids, r.finish_reason, r.nfe) for r in expected], batch
    assert {r.finish_reason for r in expected} == {"stop", "length"}  # both occur


def test_constrained_rows_are_token_identical_to_one_rank(pair: tuple[Engine, Engine]
                                                         ) -> None:
    """Each rank keeps a constrained row's best tokens over the whole vocabulary (ADR
    043) and builds the same witness."""
    from dinfer_engine.constraints.spec import ConstraintSpec

    one, two = pair
    specs = [ConstraintSpec.regex("[a-e]{2}[0-9]{3}"), None,
             ConstraintSpec.choice(["yes", "no", "maybe so"])] * 2
    config = GenerationConfig(gen_length=24)
    expected = one.generate(asked(prompts(), seeds=list(range(6)), constraints=specs), config)
    got = two.generate(asked(prompts(), seeds=list(range(6)), constraints=specs), config)
    assert [(r.token_ids, r.finish_reason) for r in got] == \
        [(r.token_ids, r.finish_reason) for r in expected]
    assert all(r.finish_reason == "stop" for r, s in zip(got, specs, strict=True) if s)


def test_shared_prefixes_give_one_ranks_tokens(pair: tuple[Engine, Engine]) -> None:
    """The two-rank engine's prefix cache (each rank its heads' keys/values, whole-model
    bytes counted alike) restores whole 32-token blocks; the answers stay one rank's
    without a cache."""
    one, two = pair
    shared = [4 + i * 5 % 40 for i in range(70)]  # two whole blocks and 6 tokens
    batch = [shared + [5 + s, 9] if s % 3 == 0 else shared[:40] + [7] * s if s % 3 == 1
             else shared for s in range(6)]  # 2, 1, 2, 2, 1, 2 whole shared blocks
    config = GenerationConfig(gen_length=16, max_batch_size=4)
    expected = one.generate(asked(batch, seeds=list(range(6))), config)
    got = two.generate(asked(batch, seeds=list(range(6))), config)
    assert [r.token_ids for r in got] == [r.token_ids for r in expected]
    assert sum(r.prefix_tokens_reused or 0 for r in got) == 256  # all but row 0's


def test_ranks_follow_the_prefix_cache_scopes(pair: tuple[Engine, Engine]) -> None:
    """Another scope's identical prompt reuses nothing on two ranks either, the same
    scope all its whole blocks; the answers stay one rank's (ADR 040)."""
    from dinfer_engine.cache_scope import CacheScope

    one, two = pair
    prompt = [[4 + i * 7 % 40 for i in range(70)]]  # two whole blocks and 6 tokens
    config = GenerationConfig(gen_length=16)
    expected = [r.token_ids for r in one.generate(asked(prompt, seeds=[3]), config)]
    reused = []
    for owner in ("owner:a", "owner:b", "owner:a"):
        got = two.generate(asked(prompt, seeds=[3], scopes=[CacheScope(owner)]), config)
        assert [r.token_ids for r in got] == expected
        reused.append(got[0].prefix_tokens_reused)
    assert reused == [0, 0, 64]


def test_every_rank_computes_on_the_fixed_grid(tmp_path: Path) -> None:
    """shard_model keeps ADR 034's grid: a rank's split linears are GridLinears
    (column) or sum partial products computed by fixed_grid.linear (row)."""
    path = write(tmp_path / "moe", "moe")
    model = load_model(path, torch.device("cpu"), torch.float32, Group(0, 2))
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    rows = [m for m in linears if isinstance(m, RowParallelLinear)]
    assert rows and all(m.product is fixed_grid.linear for m in rows)
    assert all(isinstance(m, fixed_grid.GridLinear) for m in linears if m not in rows)


def test_every_rank_holds_its_slices(tmp_path: Path) -> None:
    """Heads, MLP features (the self-conditioning MLP's too), experts and vocabulary rows
    split in rank order; everything else, and the one key/value head of the small
    shape's full layer, is whole on both ranks."""
    path = write(tmp_path / "small", "small")
    cpu = torch.device("cpu")
    full = dict(load_model(path, cpu, torch.float32).named_parameters())
    ranks = [dict(load_model(path, cpu, torch.float32, Group(r, 2)).named_parameters())
             for r in range(2)]
    split = set()
    for name, whole in full.items():
        parts = [rank[name] for rank in ranks]
        if parts[0].shape == whole.shape:
            assert all(torch.equal(part, whole) for part in parts), name
            continue
        split.add(name.split(".")[-2])
        dim = next(d for d in range(whole.dim()) if parts[0].shape[d] != whole.shape[d])
        assert torch.equal(torch.cat(parts, dim=dim), whole), name
    assert split == SPLIT
    full_layer_keys = "model.decoder.layers.2.self_attn.k_proj.weight"
    assert all(torch.equal(rank[full_layer_keys], full[full_layer_keys]) for rank in ranks)


def test_dimensions_that_do_not_divide_are_refused_before_any_process_starts(
        tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocabulary size=45 does not divide by "
                                         "tensor_parallel=2"):
        Engine.from_pretrained(write_tiny_diffusion_gemma(tmp_path / "odd"),
                               tensor_parallel=2)
    with pytest.raises(ValueError, match="num_experts=2 does not divide by "
                                         "tensor_parallel=3"):
        Engine.from_pretrained(write_tiny_diffusion_gemma(tmp_path / "three", vocab_size=48),
                               tensor_parallel=3)
