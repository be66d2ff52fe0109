"""Decoders against plain loops written from the published algorithms (LLaDA's generate,
Fast-dLLM's threshold rule), and temperature sampling."""

from __future__ import annotations

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.decoding.decoders import linear_schedule, sample
from tests.engine_requests import asked
from tests.tiny_model import MASK_ID

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11]


def llada_num_transfer_tokens(block_mask: torch.Tensor, steps: int) -> torch.Tensor:
    """LLaDA's get_num_transfer_tokens."""
    mask_num = block_mask.sum(dim=1, keepdim=True)
    base, remainder = mask_num // steps, mask_num % steps
    counts = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        counts[i, : remainder[i]] += 1
    return counts


def predict(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax tokens (never the mask token: the engine's one documented deviation) and
    their float64 softmax probability."""
    logits = model(x).logits
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    logits[..., MASK_ID] = -torch.inf
    x0 = logits.argmax(-1)
    return x0, torch.gather(probs, -1, x0[..., None]).squeeze(-1)


@torch.no_grad()
def llada_generate(model, prompt: list[int], steps: int, gen_length: int,
                   block_length: int) -> list[int]:
    """LLaDA's reference generate(), temperature 0, remasking='low_confidence'."""
    p = len(prompt)
    x = torch.full((1, p + gen_length), MASK_ID, dtype=torch.long)
    x[0, :p] = torch.tensor(prompt)
    num_blocks = gen_length // block_length
    steps = steps // num_blocks
    for b in range(num_blocks):
        block_mask = x[:, p + b * block_length: p + (b + 1) * block_length] == MASK_ID
        num_transfer = llada_num_transfer_tokens(block_mask, steps)
        for i in range(steps):
            mask_index = x == MASK_ID
            x0, x0_p = predict(model, x)
            x0_p[:, p + (b + 1) * block_length:] = -torch.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            _, select = torch.topk(confidence[0], k=int(num_transfer[0, i]))
            x[0, select] = x0[0, select]
    return x[0, p:].tolist()


@torch.no_grad()
def threshold_generate(model, prompt: list[int], gen_length: int, block_length: int,
                       threshold: float) -> tuple[list[int], int]:
    """Fast-dLLM's parallel decoding: per block, until no mask is left, commit every masked
    position whose confidence is >= threshold, or else the single most confident one."""
    p, forwards = len(prompt), 0
    x = torch.full((1, p + gen_length), MASK_ID, dtype=torch.long)
    x[0, :p] = torch.tensor(prompt)
    for b in range(gen_length // block_length):
        block = slice(p + b * block_length, p + (b + 1) * block_length)
        while (x[0, block] == MASK_ID).any():
            x0, x0_p = predict(model, x)
            forwards += 1
            masked = x[0, block] == MASK_ID
            confidence = torch.where(masked, x0_p[0, block], -torch.inf)
            chosen = confidence >= threshold
            if not chosen.any():
                chosen[confidence.argmax()] = True
            x[0, block] = torch.where(chosen, x0[0, block], x[0, block])
    return x[0, p:].tolist(), forwards


def test_linear_schedule_matches_llada():
    for block_length, steps in ((8, 8), (8, 3), (32, 5), (4, 6)):
        expected = llada_num_transfer_tokens(torch.ones(1, block_length, dtype=torch.bool), steps)
        assert linear_schedule(block_length, steps).tolist() == expected[0].tolist()


@pytest.mark.parametrize(("gen_length", "block_length", "steps"),
                         [(12, 12, 12), (16, 4, 16), (16, 8, 6), (12, 4, 3), (8, 4, 12)])
def test_fixed_matches_llada_reference(tiny_engine: Engine, gen_length, block_length, steps):
    config = GenerationConfig(gen_length=gen_length, block_length=block_length, steps=steps,
                              decoder="fixed", temperature=0.0, cache="none", early_stop=False)
    outs = tiny_engine.generate(PROMPTS, config)
    for prompt, out in zip(PROMPTS, outs, strict=True):
        assert out.token_ids == llada_generate(tiny_engine.model, prompt, steps, gen_length,
                                               block_length)
        # a step that would commit nothing (more steps than block tokens) is skipped
        assert out.nfe == min(steps // (gen_length // block_length), block_length) * (
            gen_length // block_length)


@pytest.mark.parametrize("threshold", [0.5, 0.9, 1.0])
def test_threshold_matches_fast_dllm_rule(tiny_engine: Engine, threshold):
    config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                              threshold=threshold, cache="none", early_stop=False)
    outs = tiny_engine.generate(PROMPTS, config)
    for prompt, out in zip(PROMPTS, outs, strict=True):
        tokens, forwards = threshold_generate(tiny_engine.model, prompt, 16, 8, threshold)
        assert (out.token_ids, out.nfe) == (tokens, forwards)


def test_lower_threshold_takes_fewer_forwards(tiny_engine: Engine):
    def total_nfe(threshold: float) -> int:
        config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                                  threshold=threshold, early_stop=False)
        return sum(o.nfe for o in tiny_engine.generate(PROMPTS, config))

    strict, loose = total_nfe(1.0), total_nfe(0.3)
    assert strict == 16 * len(PROMPTS)  # nothing is ever certain: one token per forward
    assert loose < strict


def test_gumbel_max_samples_softmax_of_logits_over_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 5.0])  # index 4 plays the banned mask
    temperature, draws = 0.7, 4000
    generators = [torch.Generator().manual_seed(i) for i in range(draws)]
    tokens, confidence = sample(logits.expand(draws, 1, -1), temperature, generators, banned=4)
    assert 4 not in tokens
    frequency = torch.bincount(tokens.flatten(), minlength=5)[:4].double() / draws
    expected = torch.softmax(logits[:4].double() / temperature, dim=0)
    torch.testing.assert_close(frequency, expected, atol=0.03, rtol=0)
    torch.testing.assert_close(confidence.flatten(),
                               torch.softmax(logits.double(), 0)[tokens.flatten()])


def seeded(seed: int | None) -> GenerationConfig:
    return GenerationConfig(gen_length=16, block_length=8, temperature=1.0, seed=seed,
                            early_stop=False)


def test_same_seed_same_tokens_in_any_batch(tiny_engine: Engine):
    alone = [tiny_engine.generate([p], seeded(7))[0].token_ids for p in PROMPTS]
    together = [o.token_ids for o in tiny_engine.generate(PROMPTS * 2, seeded(7))]
    assert together == alone * 2


def test_different_seeds_sample_differently(tiny_engine: Engine):
    greedy = [o.token_ids for o in tiny_engine.generate(PROMPTS, GenerationConfig(
        gen_length=16, block_length=8, early_stop=False))]
    first = [o.token_ids for o in tiny_engine.generate(PROMPTS, seeded(1))]
    second = [o.token_ids for o in tiny_engine.generate(PROMPTS, seeded(2))]
    assert first != second
    assert first != greedy


def test_per_prompt_seeds_equal_separate_seeded_runs(tiny_engine: Engine):
    mixed = tiny_engine.generate(asked(PROMPTS, seeds=[1, 2, 1]), seeded(None))
    assert [o.token_ids for o in mixed] == [
        tiny_engine.generate([prompt], seeded(seed))[0].token_ids
        for prompt, seed in zip(PROMPTS, [1, 2, 1], strict=True)]
