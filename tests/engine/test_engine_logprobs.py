"""Log-probabilities of a diffusion model's answer: each token's log-probability at the
iteration that committed it, checked against a one-row loop written from Fast-dLLM's
threshold rule that records log_softmax at each commit."""

from __future__ import annotations

import math

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig, GenerationRequest
from tests.engine_requests import asked
from tests.tiny_model import MASK_ID

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11]


@torch.no_grad()
def threshold_with_logprobs(model, prompt: list[int], gen_length: int, block_length: int,
                            threshold: float, top: int):
    """One row: per block, until no mask is left, predict every position; commit each
    masked position whose probability is >= threshold (else the most likely one), and
    note its log_softmax value and the `top` best non-mask tokens at that iteration."""
    p = len(prompt)
    x = torch.full((1, p + gen_length), MASK_ID, dtype=torch.long)
    x[0, :p] = torch.tensor(prompt)
    chosen, alternatives = [None] * gen_length, [None] * gen_length
    for b in range(gen_length // block_length):
        while (x[0, p + b * block_length: p + (b + 1) * block_length] == MASK_ID).any():
            log_probs = torch.log_softmax(model(x).logits[0].double(), dim=-1)
            candidates = log_probs.clone()
            candidates[:, MASK_ID] = -math.inf
            best = candidates.argmax(-1)
            block = range(p + b * block_length, p + (b + 1) * block_length)
            masked = [c for c in block if x[0, c] == MASK_ID]
            commit = [c for c in masked if log_probs[c, best[c]].exp() >= threshold]
            if not commit:
                commit = [max(masked, key=lambda c: log_probs[c, best[c]])]
            for c in commit:
                x[0, c] = best[c]
                chosen[c - p] = float(log_probs[c, best[c]])
                values, ids = candidates[c].topk(top)
                alternatives[c - p] = list(zip(ids.tolist(), values.tolist(), strict=True))
    return x[0, p:].tolist(), chosen, alternatives


@pytest.mark.parametrize("threshold", [0.3, 1.0])
def test_logprobs_are_those_of_the_iteration_that_committed_each_token(tiny_engine: Engine,
                                                                        threshold):
    config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                              threshold=threshold, early_stop=False, logprobs=True,
                              top_logprobs=3)
    for prompt, out in zip(PROMPTS, tiny_engine.generate(PROMPTS, config), strict=True):
        tokens, chosen, alternatives = threshold_with_logprobs(
            tiny_engine.model, prompt, 16, 8, threshold, top=3)
        assert out.token_ids == tokens
        # float32 logits of a padded batch differ from one row's in the last bits
        torch.testing.assert_close(out.logprobs, chosen, atol=1e-5, rtol=1e-5)
        assert [[t for t, _ in row] for row in out.top_logprobs] == [
            [t for t, _ in row] for row in alternatives]
        torch.testing.assert_close([[v for _, v in row] for row in out.top_logprobs],
                                   [[v for _, v in row] for row in alternatives],
                                   atol=1e-5, rtol=1e-5)


def test_logprobs_follow_token_ids_and_stay_off_unless_asked(tiny_engine: Engine):
    plain = tiny_engine.generate(PROMPTS, GenerationConfig(gen_length=16, block_length=8))
    assert all(o.logprobs is None and o.top_logprobs is None for o in plain)
    asked = tiny_engine.generate(PROMPTS, GenerationConfig(gen_length=16, block_length=8,
                                                           logprobs=True))
    for without, out in zip(plain, asked, strict=True):
        assert out.token_ids == without.token_ids  # asking changes nothing else
        assert len(out.logprobs) == len(out.token_ids) and out.top_logprobs is None
        assert all(v <= 0 for v in out.logprobs)


def test_logprobs_of_a_row_do_not_depend_on_its_batch(tiny_engine: Engine):
    config = GenerationConfig(gen_length=16, block_length=8, temperature=1.0,
                              early_stop=False, logprobs=True, top_logprobs=2)
    alone = [tiny_engine.generate(asked([p], seeds=[4]), config)[0] for p in PROMPTS]
    together = tiny_engine.generate(asked(PROMPTS * 2, seeds=[4] * 6), config)
    for single, batched in zip(alone * 2, together, strict=True):
        assert single.token_ids == batched.token_ids
        torch.testing.assert_close(single.logprobs, batched.logprobs, atol=1e-5, rtol=1e-5)
        assert ([[t for t, _ in r] for r in single.top_logprobs]
                == [[t for t, _ in r] for r in batched.top_logprobs])


def test_block_diffusion_logprobs_cover_exactly_the_answer(tmp_path):
    """LLaDA2's blocks sit on an absolute grid: a block may start inside the prompt and
    end after the answer; only the answer's own tokens are reported. Greedy, so each
    chosen token is the most likely one of its iteration."""
    from tests.tiny_moe import write_tiny_moe

    engine = Engine.from_pretrained(write_tiny_moe(tmp_path / "llada2", "llada2"))
    prompts = [[5, 9, 12, 7, 30], [20, 21, 22, 23, 24, 25, 26, 27], [8]]
    config = GenerationConfig(gen_length=8, block_length=4, decoder="threshold",
                              threshold=0.8, early_stop=False, logprobs=True, top_logprobs=2)
    plain = engine.generate(prompts, GenerationConfig(gen_length=8, block_length=4,
                                                      decoder="threshold", threshold=0.8,
                                                      early_stop=False))
    outs = engine.generate(prompts, config)
    for without, out, prompt in zip(plain, outs, prompts, strict=True):
        assert out.token_ids == without.token_ids and len(out.logprobs) == 8
        assert not any(math.isnan(v) for v in out.logprobs)
        for token, value, top in zip(out.token_ids, out.logprobs, out.top_logprobs,
                                     strict=True):
            assert top[0][0] == token and top[0][1] == pytest.approx(value, abs=1e-9)
        [alone] = engine.generate([prompt], config)
        torch.testing.assert_close(alone.logprobs, out.logprobs, atol=1e-5, rtol=1e-5)


def test_logprobs_are_per_request_within_one_call(tiny_engine: Engine):
    """logprobs and top_logprobs are per-row fields: requests asking for them or not
    share a call; each result holds what its own request asked, the tokens those of a
    call without them."""
    config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                              threshold=0.5)
    own = [{"logprobs": True, "top_logprobs": 3}, {}, {"logprobs": True}]
    mixed = tiny_engine.generate([GenerationRequest(p, fields=f)
                                  for p, f in zip(PROMPTS, own, strict=True)], config)
    plain = tiny_engine.generate(PROMPTS, config)
    every = tiny_engine.generate(PROMPTS, GenerationConfig(
        gen_length=16, block_length=8, decoder="threshold", threshold=0.5, logprobs=True,
        top_logprobs=3))
    assert [r.token_ids for r in mixed] == [r.token_ids for r in plain]
    assert mixed[0].logprobs == every[0].logprobs
    assert mixed[0].top_logprobs == every[0].top_logprobs
    assert mixed[1].logprobs is None and mixed[1].top_logprobs is None
    assert mixed[2].logprobs == every[2].logprobs and mixed[2].top_logprobs is None
    with pytest.raises(ValueError, match="prompt 0: gen_length cannot differ"):
        tiny_engine.generate([GenerationRequest([5], fields={"gen_length": 8})], config)
