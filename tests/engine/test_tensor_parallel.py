"""Tensor parallelism (dinfer_engine/ranks/, dinfer_engine/parallel/) against the one-rank
engine on the same tiny checkpoint, for each family: 2 gloo ranks on the CPU, fp32.
Greedy generations are token-identical with every decoder and cache strategy, seeded
samples and their log-probabilities match, logits agree, and each rank holds its share of
the weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from dinfer_engine import Engine, GenerationConfig, GenerationRequest, Infill
from dinfer_engine.loading.checkpoint import load_model, weight_files
from dinfer_engine.parallel.group import Group
from dinfer_engine.sampling_controls import SamplingControls
from tests.engine_requests import asked
from tests.tensor_parallel_models import replicated, write_family

FAMILIES = ("llada", "llada_moe", "llada2")
PROMPTS = ["what is 2+2?", "hello there", [5, 9, 12, 7, 30, 11], "a"]
DECODERS = ("fixed", "threshold", "hierarchical", "credit", "editing")
CACHES = ("none", "prefix", "dual", "vicinity")


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine, Path]]:
    """(one-rank engine, two-rank engine, checkpoint) of one family; the two-rank engine
    is closed before the next family's starts."""
    path = write_family(tmp_path_factory.mktemp("tp") / request.param, request.param)
    with Engine.from_pretrained(path, tensor_parallel=2) as parallel:
        yield Engine.from_pretrained(path), parallel, path


def token_ids(engine: Engine, config: GenerationConfig, **kwargs) -> list[list[int]]:
    return [r.token_ids for r in engine.generate(PROMPTS, config, **kwargs)]


def test_logits_agree(pair):
    one, two, _ = pair
    ids = [[5, 9, 12, 7, 30, 11, 3, 3], [2, 3, 3, 3, 8, 9, 10, 3]]
    expected, got = one.logits(ids), two.logits(ids)
    assert got.shape == expected.shape == (2, 8, 48)
    # fp32 sums in another order: 1e-5, plus one fp32 rounding of logits of size ~30
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)


def test_greedy_is_token_identical_with_every_decoder_and_cache(pair):
    one, two, _ = pair
    caches = ("none",) if one.model.family.block_causal else CACHES  # block diffusion caches itself
    for decoder in DECODERS:
        for cache in caches:
            config = GenerationConfig(gen_length=16, block_length=8, decoder=decoder,
                                      cache=cache, threshold=0.6, max_batch_size=3)
            assert token_ids(two, config) == token_ids(one, config), (decoder, cache)


def test_smoothing_and_early_stop_off(pair):
    one, two, _ = pair
    for smoothing, early_stop in ((True, True), (False, False)):
        config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                                  smoothing=smoothing, early_stop=early_stop, threshold=0.7)
        assert token_ids(two, config) == token_ids(one, config)


def test_seeded_sampling_and_logprobs_match(pair):
    one, two, _ = pair
    seeds = [11, 12, 13, 14]
    for top_k, top_p in ((0, 1.0), (5, 1.0), (0, 0.8), (4, 0.9)):
        config = GenerationConfig(gen_length=16, block_length=8, temperature=0.9,
                                  top_k=top_k, top_p=top_p, logprobs=True, top_logprobs=3)
        expected = one.generate(asked(PROMPTS, seeds=seeds), config)
        got = two.generate(asked(PROMPTS, seeds=seeds), config)
        assert [r.token_ids for r in got] == [r.token_ids for r in expected], (top_k, top_p)
        for a, b in zip(got, expected, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            assert [[t for t, _ in top] for top in a.top_logprobs] == \
                [[t for t, _ in top] for top in b.top_logprobs]


def test_sampling_controls_are_those_of_one_rank(pair):
    """Each rank changes the ids of its vocabulary slice (docs/adr/060): greedy rows with
    every control, and sampled rows with min_p, equal the one-rank engine's."""
    one, two, _ = pair
    stops = {str(t): 8.0 for t in one.stop_ids}  # stop tokens likely, then banned early
    controls = dict(logit_bias={**stops, "40": 3.0, "7": -100}, presence_penalty=0.5,
                    frequency_penalty=0.4, repetition_penalty=1.3, min_tokens=6)
    for decoder in ("fixed", "threshold", "editing"):
        config = GenerationConfig(gen_length=16, block_length=8, decoder=decoder,
                                  threshold=0.6, **controls)
        assert token_ids(two, config) == token_ids(one, config), decoder
    sampled = GenerationConfig(gen_length=16, block_length=8, temperature=0.9, min_p=0.2,
                               ignore_eos=True, **{k: v for k, v in controls.items()
                                                   if k != "min_tokens"})
    seeds = [11, 12, 13, 14]
    assert [r.token_ids for r in two.generate(asked(PROMPTS, seeds=seeds), sampled)] == \
        [r.token_ids for r in one.generate(asked(PROMPTS, seeds=seeds), sampled)]
    own = [GenerationRequest(prompt, controls=SamplingControls.of(
        GenerationConfig(**controls).resolve({}), one.model.config.embedding_size)
        if i % 2 else None) for i, prompt in enumerate(PROMPTS)]  # per request, mixed
    config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold")
    assert [r.token_ids for r in two.generate(own, config)] == \
        [r.token_ids for r in one.generate(own, config)]


def test_callbacks_and_results_are_those_of_one_rank(pair):
    one, two, _ = pair
    config = GenerationConfig(gen_length=16, block_length=8, max_batch_size=2)
    seen: list[int] = []
    got = two.generate(PROMPTS, config, on_result=lambda i, r: seen.append(i))
    expected = one.generate(PROMPTS, config)
    assert sorted(seen) == list(range(len(PROMPTS)))
    assert [(r.text, r.finish_reason, r.nfe, r.completion_tokens) for r in got] == \
        [(r.text, r.finish_reason, r.nfe, r.completion_tokens) for r in expected]
    unseeded = two.generate(PROMPTS, GenerationConfig(gen_length=16, block_length=8,
                                                      temperature=1.0))
    assert all(len(r.token_ids) <= 16 for r in unseeded)


def test_infill_and_its_length_search_are_those_of_one_rank(pair):
    one, two, _ = pair
    prompts = [Infill(["what is", "?"], spans=[6]), "hello",
               Infill([[5, 9], [12], [7, 30]], spans=[3, 4]), Infill(["a", "b"], lengths=[4, 8])]
    config = GenerationConfig(gen_length=8, block_length=4, decoder="threshold", cache="dual",
                              max_batch_size=3)
    if one.model.family.block_causal:  # LLaDA2 refuses infill, on any number of ranks
        for engine in (one, two):
            with pytest.raises(ValueError, match="prompt 0: infill needs a bidirectional"):
                engine.generate(prompts, config)
        return
    expected, got = one.generate(prompts, config), two.generate(prompts, config)
    assert [(r.token_ids, r.gaps, r.spans) for r in got] == [
        (r.token_ids, r.gaps, r.spans) for r in expected]
    searched, reference = got[3].length_search, expected[3].length_search
    assert searched is not None and reference is not None
    assert [s for _, s in searched] == pytest.approx([s for _, s in reference], abs=1e-4)


def test_each_rank_holds_its_share_of_the_weights(pair):
    one, two, path = pair
    total = replicated_bytes = 0
    for name, file in weight_files(path).items():
        if ".layers.3." in name:  # LLaDA2's multi-token-prediction layer, not loaded
            continue
        with safe_open(file, framework="pt") as f:
            size = 4 * int(torch.tensor(f.get_slice(name).get_shape()).prod())  # fp32
        total += size
        replicated_bytes += size if replicated(name) else 0
    assert one.parameter_bytes() == [total]
    share = (total - replicated_bytes) // 2 + replicated_bytes
    assert two.parameter_bytes() == [share, share]
    assert two.tensor_parallel == 2 and one.tensor_parallel == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_every_rank_loads_its_slices(family, tmp_path: Path):
    """Each rank's parameters, loaded without starting any process, are the slices of the
    full model's that the Megatron layout gives it; at 4 ranks the 2 key/value heads are
    replicated (ranks 0-1 hold head 0, ranks 2-3 head 1)."""
    path = write_family(tmp_path / family, family)
    full = dict(load_model(path, torch.device("cpu"), torch.float32).named_parameters())
    for size in (2, 4):
        ranks = [dict(load_model(path, torch.device("cpu"), torch.float32,
                                 Group(rank, size)).named_parameters()) for rank in range(size)]
        for name, whole in full.items():
            parts = [rank[name] for rank in ranks]
            if replicated(name):
                assert all(torch.equal(part, whole) for part in parts), name
            elif name.endswith(("k_proj.weight", "v_proj.weight")) and size == 4:
                heads = whole.chunk(2)
                assert [torch.equal(p, heads[r // 2]) for r, p in enumerate(parts)] == [True] * 4
            elif name.endswith("query_key_value.weight") and size == 4:
                q, k, v = whole.split([32, 16, 16])  # 4 query, 2 key, 2 value heads of 8
                for r, part in enumerate(parts):
                    expected = torch.cat([q[8 * r:8 * r + 8], k.chunk(2)[r // 2],
                                          v.chunk(2)[r // 2]])
                    assert torch.equal(part, expected), (name, r)
            elif not name.endswith("query_key_value.weight"):
                dim = next(d for d in range(whole.dim()) if parts[0].shape[d] != whole.shape[d])
                assert torch.equal(torch.cat(parts, dim=dim), whole), name
