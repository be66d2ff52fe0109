"""Continuous batching: results independent of batch composition, budgets respected, and
early termination at a stop token."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig, loop
from dinfer_engine.batch import Request
from tests.tiny_model import EOS_ID, EXTRA_STOP_ID

STOP_AT = 18  # absolute position from which the boosted model wants to stop


@contextmanager
def stops_at(engine: Engine, position: int, token: int = EOS_ID) -> Iterator[None]:
    """Make the model strongly predict `token` at every position >= `position`."""

    def hook(module, args, kwargs, output) -> None:
        positions = kwargs["position_ids"].gather(1, kwargs["logits_index"])
        output.logits[..., token] += 40.0 * (positions >= position)

    handle = engine.model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def batch_sizes(engine: Engine) -> Iterator[list[int]]:
    sizes: list[int] = []
    handle = engine.model.register_forward_hook(
        lambda module, args, output: sizes.append(args[0].shape[0]))
    try:
        yield sizes
    finally:
        handle.remove()


def mixed_prompts(count: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 17, (count,), generator=generator).tolist()
    return [torch.randint(5, 40, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("config", [
    GenerationConfig(gen_length=16, block_length=4, decoder="fixed", cache="none"),
    GenerationConfig(gen_length=16, block_length=4, decoder="threshold", cache="dual"),
    GenerationConfig(gen_length=16, block_length=8, steps=8, cache="prefix", temperature=1.0,
                     seed=3),
], ids=["fixed-none", "threshold-dual", "sampled-prefix"])
def test_batch_of_64_mixed_lengths_equals_each_prompt_alone(tiny_engine: Engine, config):
    prompts = mixed_prompts(64)
    with stops_at(tiny_engine, STOP_AT):
        alone = [tiny_engine.generate([p], config)[0] for p in prompts]
        full = tiny_engine.generate(prompts, config)
        rolling = tiny_engine.generate(prompts, GenerationConfig(**{
            **config.__dict__, "max_batch_size": 7}))
    assert {o.finish_reason for o in alone} == {"stop", "length"}
    for one, in_full, in_rolling in zip(alone, full, rolling, strict=True):
        assert in_full.token_ids == one.token_ids
        assert in_rolling.token_ids == one.token_ids
        assert in_full.nfe == one.nfe == in_rolling.nfe


def test_budgets_bound_the_running_batch(tiny_engine: Engine):
    prompts = [[5, 6, 7, 8]] * 10
    config = GenerationConfig(gen_length=8, block_length=8, max_batch_tokens=3 * 12)
    with batch_sizes(tiny_engine) as sizes:
        tiny_engine.generate(prompts, config)
    assert max(sizes) == 3
    with batch_sizes(tiny_engine) as sizes:
        tiny_engine.generate(prompts, GenerationConfig(gen_length=8, block_length=8,
                                                       max_batch_size=2))
    assert max(sizes) == 2 and sum(sizes) == 10 * 8


def test_a_prompt_over_the_token_budget_still_runs_alone(tiny_engine: Engine):
    config = GenerationConfig(gen_length=8, block_length=8, max_batch_tokens=1)
    with batch_sizes(tiny_engine) as sizes:
        outs = tiny_engine.generate([[5, 6], [7, 8]], config)
    assert len(outs) == 2 and max(sizes) == 1


@pytest.mark.parametrize("stop_token", [EOS_ID, EXTRA_STOP_ID])
def test_early_stop_ends_the_answer_at_a_stop_token(tiny_engine: Engine, stop_token):
    prompts = [[5, 9, 12, 7], [20] * 9]  # stop after 14 and 9 answer tokens
    config = GenerationConfig(gen_length=32, block_length=8, decoder="threshold")
    with stops_at(tiny_engine, STOP_AT, stop_token):
        early = tiny_engine.generate(prompts, config)
        full = tiny_engine.generate(prompts, GenerationConfig(**{**config.__dict__,
                                                                 "early_stop": False}))
    for prompt, stopped, complete in zip(prompts, early, full, strict=True):
        end = STOP_AT - len(prompt)
        assert stopped.finish_reason == complete.finish_reason == "stop"
        assert stopped.token_ids == complete.token_ids[:end]
        assert complete.token_ids[end] == stop_token
        assert stopped.text == complete.text
        assert stopped.completion_tokens == end and len(complete.token_ids) == 32
        assert stopped.nfe < complete.nfe


def test_after_an_early_stop_the_rest_of_the_answer_is_eos(tiny_engine: Engine):
    config = tiny_engine.resolve_config(GenerationConfig(gen_length=16, block_length=4))
    rows = []
    with stops_at(tiny_engine, 10):
        loop.run(tiny_engine.model, [Request(0, [5, 6, 7, 8], None)], config,
                 tiny_engine.stop_ids, rows.append)
    answer = rows[0].answer
    assert answer[6:] == [EOS_ID] * 10
    assert tiny_engine.mask_id not in answer
    assert rows[0].nfe < 16
