"""The KV cache attended to where it lies (ADR 014): span forwards allocate nothing the size
of the cache, rows keep their slot while others come and go, segments cover a forward's
slots, and a long prompt widens only the full forwards of rows about its length."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from dinfer_engine import Engine, GenerationConfig
from dinfer_engine.models.forward_inputs import CacheMode, grouped_attention, segments
from dinfer_engine.models.kv_cache import KVCache


@contextmanager
def forwards(engine: Engine) -> Iterator[list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []

    def hook(module, args, kwargs, output) -> None:
        ids = args[0] if args else kwargs["input_ids"]
        cache = kwargs.get("cache")
        calls.append({"shape": tuple(ids.shape), "store": bool(kwargs.get("store_cache")),
                      "slots": kwargs.get("cache_rows"),
                      "storage": None if cache is None or cache.keys[0] is None
                      else cache.keys[0].untyped_storage().data_ptr()})

    handle = engine.model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


def test_a_span_forward_allocates_nothing_the_size_of_the_cache(tiny_engine: Engine):
    model, rows, width, span = tiny_engine.model, 8, 240, 4
    cache = KVCache(model.config.n_layers, reserve=span)
    cache.resize(torch.arange(0), rows, width)
    ids = torch.randint(5, 40, (rows, width), generator=torch.Generator().manual_seed(0))
    model(ids, cache=cache, store_cache=True)
    present = torch.tensor([0, 1, 2, 4, 5, 7])  # rows 3 and 6 start a block elsewhere
    keys = torch.ones(len(present), width + span, dtype=torch.bool)
    keys[:, width - span:width] = False  # the recomputed columns' cached copies
    positions = torch.arange(width - span, width).expand(len(present), -1)
    with torch.inference_mode():
        expected = model(ids[present], attention_mask=torch.ones(len(present), width,
                                                                  dtype=torch.bool)).logits
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model(ids[present, -span:], position_ids=positions, attention_mask=keys,
                        cache=cache, cache_rows=present).logits
    torch.testing.assert_close(out, expected[:, -span:], rtol=1e-5, atol=1e-5)
    one_layer = cache.keys[0].numel() * cache.keys[0].element_size()
    largest = max(e.cpu_memory_usage for e in prof.events())
    assert 0 < largest < one_layer / 8


def test_segments_take_short_gaps_as_dummies_and_start_at_the_first_visible_column():
    cache = KVCache(1)
    cache.resize(torch.arange(0), 12, 10)
    slots = torch.tensor([9, 0, 1, 3, 4])  # the forward's rows 0..4
    mask = torch.ones(5, 1, 1, 10, dtype=torch.bool)
    mask[1:, ..., :6] = False  # rows at slots 0..4 are short: their first 6 columns pad
    mask[0, ..., :2] = False
    parts = segments(cache, CacheMode.WRITE, slots, mask, span=2, dtype=torch.float32)
    assert [(p.lo, p.hi, p.key_start) for p in parts] == [(0, 5, 6), (9, 10, 2)]
    dummies = parts[0]
    assert dummies.rows is not None and dummies.local is not None
    assert dummies.rows.tolist() == [1, 2, 3, 4] and dummies.local.tolist() == [0, 1, 3, 4]
    assert dummies.mask.shape == (5, 1, 1, 4) and bool((dummies.mask == 0).all())
    assert parts[1].rows is None and parts[1].first == 0


def test_rows_keep_their_slot_and_joining_rows_take_freed_ones(tiny_engine: Engine):
    prompts = [[5 + i, 9, 12, 7, 30, 31] for i in range(7)]
    config = GenerationConfig(gen_length=16, block_length=4, decoder="threshold",
                              threshold=0.7, cache="dual", max_batch_size=3,
                              early_stop=False)
    with forwards(tiny_engine) as calls:
        rolling = tiny_engine.generate(prompts, config)
    alone = [tiny_engine.generate([p], config)[0] for p in prompts]
    assert [o.token_ids for o in rolling] == [o.token_ids for o in alone]
    cached = [c for c in calls if c["slots"] is not None]
    assert max(int(c["slots"].max()) for c in cached) == 2  # three slots, reused
    storages = {c["storage"] for c in cached if c["storage"] is not None}
    assert len(storages) == 1  # allocated once, never copied as rows came and went


def test_a_long_prompt_widens_only_rows_of_about_its_length(tiny_engine: Engine):
    prompts = [[5 + i % 30 for i in range(100)], [5, 9, 12], [7, 8, 9, 10], [20, 21]]
    config = GenerationConfig(gen_length=8, block_length=8, steps=2, decoder="fixed",
                              cache="dual", early_stop=False)
    with forwards(tiny_engine) as calls:
        together = tiny_engine.generate(prompts, config)
    first_full = [c["shape"] for c in calls if c["store"]][:2]
    assert first_full == [(1, 108), (3, 12)]  # not 4 rows of 108 columns
    alone = [tiny_engine.generate([p], config)[0] for p in prompts]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]


def test_grouped_queries_equal_expanded_key_heads():
    """The GPU path for grouped-query attention (no expanded keys/values) against SDPA's."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, 5, 16, generator=generator)
    k, v = (torch.randn(3, 2, 11, 16, generator=generator) for _ in range(2))
    mask = torch.zeros(3, 1, 5, 11).masked_fill_(
        torch.rand(3, 1, 5, 11, generator=generator) < 0.3, -torch.inf)
    mask[..., 0] = 0  # every query sees a key
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                enable_gqa=True)
    got = grouped_attention(q, k, v, mask.repeat(1, 1, 4, 1))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
