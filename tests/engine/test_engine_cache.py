"""prefix / dual KV caches: they run, recompute only what they claim, and their block-start
forwards are plain full forwards whose logits drive that step."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig

PROMPT = [5, 9, 12, 7, 30, 31]
GEN, BLOCK, STEPS = 16, 4, 8  # 4 blocks of 2 steps each


@dataclass
class Call:
    width: int
    store: bool
    logits: torch.Tensor
    kwargs: dict


@contextmanager
def recorded(engine: Engine) -> Iterator[list[Call]]:
    calls: list[Call] = []

    def hook(module, args, kwargs, output) -> None:
        ids = args[0] if args else kwargs["input_ids"]
        calls.append(Call(ids.shape[1], bool(kwargs.get("cache") is not None
                                             and kwargs.get("store_cache")),
                          output.logits.clone(), {"input_ids": ids, **kwargs}))

    handle = engine.model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


def run(engine: Engine, cache: str, decoder: str = "fixed") -> tuple[list[Call], list[int]]:
    config = GenerationConfig(gen_length=GEN, block_length=BLOCK, steps=STEPS, cache=cache,
                              decoder=decoder, early_stop=False)
    with recorded(engine) as calls:
        out = engine.generate([PROMPT], config)[0]
    assert out.nfe == len(calls)
    return calls, out.token_ids


def test_no_cache_recomputes_the_whole_sequence_every_step(tiny_engine: Engine):
    calls, _ = run(tiny_engine, "none")
    assert [c.width for c in calls] == [len(PROMPT) + GEN] * STEPS
    assert not any(c.store for c in calls)


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_cache_recomputes_only_what_it_claims(tiny_engine: Engine, cache):
    calls, tokens = run(tiny_engine, cache)
    assert len(tokens) == GEN and tiny_engine.mask_id not in tokens
    full = len(PROMPT) + GEN
    expected = []
    for block in range(GEN // BLOCK):
        span = BLOCK if cache == "dual" else GEN - block * BLOCK
        expected += [(full, True)] + [(span, False)] * (STEPS // (GEN // BLOCK) - 1)
    assert [(c.width, c.store) for c in calls] == expected
    recomputed = sum(c.width for c in calls)
    assert recomputed < full * STEPS


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_block_start_forward_equals_a_forward_without_cache(tiny_engine: Engine, cache):
    calls, _ = run(tiny_engine, cache, decoder="threshold")
    starts = [c for c in calls if c.store]
    assert len(starts) == GEN // BLOCK
    for call in starts:
        plain = tiny_engine.model(call.kwargs["input_ids"],
                                  position_ids=call.kwargs["position_ids"],
                                  logits_index=call.kwargs["logits_index"]).logits
        torch.testing.assert_close(call.logits, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_first_step_of_first_block_agrees_with_no_cache(tiny_engine: Engine, cache):
    """The second forward sees the sequence after step one: identical in every mode."""
    plain, _ = run(tiny_engine, "none")
    cached, _ = run(tiny_engine, cache)
    after_first_step = plain[1].kwargs["input_ids"][:, len(PROMPT):len(PROMPT) + BLOCK]
    assert torch.equal(cached[1].kwargs["input_ids"][:, :BLOCK], after_first_step)
    torch.testing.assert_close(cached[0].logits, plain[0].logits)
