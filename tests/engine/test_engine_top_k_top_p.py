"""top_k / top_p in the sampler against a plain per-position loop written from the
definitions (top-k, then the nucleus of softmax(logits / temperature)), the sampled
frequencies, and batch invariance through the engine."""

from __future__ import annotations

import math

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.decoding.decoders import keep_top, sample
from tests.engine_requests import asked

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11]


def kept_tokens(logits: list[float], temperature: float, top_k: int, top_p: float) -> set[int]:
    """One position, by the definitions: the top_k largest logits (ties: all of them),
    then, in order of probability under softmax(kept / temperature), tokens until the
    probability of the tokens before one reaches top_p."""
    order = sorted(range(len(logits)), key=lambda t: -logits[t])
    if top_k:
        kth = logits[order[top_k - 1]]
        order = [t for t in order if logits[t] >= kth]
    total = sum(math.exp(logits[t] / temperature) for t in order)
    kept, before = set(), 0.0
    for token in order:
        if before >= top_p:
            break
        kept.add(token)
        before += math.exp(logits[token] / temperature) / total
    return kept


@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(1.0, 5, 1.0), (1.0, 0, 0.7), (0.6, 8, 0.9), (1.5, 3, 0.5),
                          (1.0, 0, 1e-9)])
def test_keep_top_keeps_what_the_definitions_keep(temperature, top_k, top_p):
    generator = torch.Generator().manual_seed(top_k)
    logits = torch.randn(3, 4, 20, generator=generator, dtype=torch.float64)
    filtered = logits.clone()
    keep_top(filtered, temperature, top_k, top_p)
    for row in range(3):
        for position in range(4):
            kept = {t for t in range(20) if filtered[row, position, t] > -math.inf}
            assert kept == kept_tokens(logits[row, position].tolist(), temperature, top_k,
                                       top_p)
            for token in kept:
                assert filtered[row, position, token] == logits[row, position, token]


def test_sampled_frequencies_follow_the_filtered_distribution():
    logits = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, 5.0])  # index 5 plays the banned mask
    temperature, draws = 0.8, 4000
    generators = [torch.Generator().manual_seed(i) for i in range(draws)]
    tokens, confidence = sample(logits.expand(draws, 1, -1), temperature, generators,
                                banned=5, top_k=3, top_p=0.8)
    kept = sorted(kept_tokens(logits[:5].tolist(), temperature, 3, 0.8))
    assert kept == [0, 1]  # top-3 is {0, 1, 2}; tokens 0 and 1 already reach 0.8
    frequency = torch.bincount(tokens.flatten(), minlength=6).double() / draws
    expected = torch.zeros(6, dtype=torch.float64)
    expected[kept] = torch.softmax(logits[kept].double() / temperature, dim=0)
    torch.testing.assert_close(frequency, expected, atol=0.03, rtol=0)
    # the decoders still rank by the model's own probability, not the filtered one
    torch.testing.assert_close(confidence.flatten(),
                               torch.softmax(logits.double(), 0)[tokens.flatten()])


def test_greedy_ignores_top_k_and_top_p(tiny_engine: Engine):
    plain = GenerationConfig(gen_length=16, block_length=8, early_stop=False)
    filtered = GenerationConfig(gen_length=16, block_length=8, early_stop=False, top_k=2,
                                top_p=0.5)
    assert ([o.token_ids for o in tiny_engine.generate(PROMPTS, plain)]
            == [o.token_ids for o in tiny_engine.generate(PROMPTS, filtered)])


def test_seeded_rows_with_top_k_top_p_do_not_depend_on_their_batch(tiny_engine: Engine):
    config = GenerationConfig(gen_length=16, block_length=8, temperature=1.0, top_k=4,
                              top_p=0.8, early_stop=False)
    alone = [tiny_engine.generate(asked([p], seeds=[3]), config)[0].token_ids for p in PROMPTS]
    together = tiny_engine.generate(asked(PROMPTS * 2, seeds=[3] * 6), config)
    assert [o.token_ids for o in together] == alone * 2
    unfiltered = GenerationConfig(gen_length=16, block_length=8, temperature=1.0,
                                  early_stop=False)
    assert alone != [tiny_engine.generate(asked([p], seeds=[3]), unfiltered)[0].token_ids
                     for p in PROMPTS]


def test_invalid_top_k_top_p_are_refused(tiny_engine: Engine):
    with pytest.raises(ValueError, match="top_p must be in"):
        tiny_engine.generate(PROMPTS, GenerationConfig(top_p=0.0))
    with pytest.raises(ValueError, match="top_k must be an integer >= 0"):
        tiny_engine.generate(PROMPTS, GenerationConfig(top_k=-1))
