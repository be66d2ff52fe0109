"""Full-vocabulary float64 work a slice of positions at a time
(dinfer_engine/decoding/slices.py): the slices, and sample() giving the same tokens and
confidences bit for bit whether a batch goes in one slice or several."""

from __future__ import annotations

import functools

import pytest
import torch

from dinfer_engine.decoding import decoders
from dinfer_engine.decoding.slices import slices


def spans(cuts: list[slice]) -> list[tuple[int, int]]:
    return [(cut.start, cut.stop) for cut in cuts]


def test_slices_cover_everything_within_the_budget_never_one_item_alone():
    assert spans(slices(10, 8, budget=32)) == [(0, 4), (4, 8), (8, 10)]
    assert spans(slices(9, 8, budget=32)) == [(0, 4), (4, 9)]  # a lone last item joins
    assert spans(slices(5, 100, budget=32)) == [(0, 2), (2, 5)]  # at least two
    assert spans(slices(1, 100, budget=32)) == [(0, 1)]
    assert spans(slices(0, 8)) == [(0, 0)]
    assert spans(slices(64, 8)) == [(0, 64)]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_sample_in_slices_is_sample_in_one(monkeypatch, temperature):
    logits = torch.randn(5, 3, 20_000, generator=torch.Generator().manual_seed(1))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        generators = [torch.Generator().manual_seed(10 + i) for i in range(5)]
        return decoders.sample(logits, temperature, generators, banned=3)

    whole = run()
    position = 8 * 3 * 20_000
    monkeypatch.setattr(decoders, "slices", functools.partial(slices, budget=position))
    assert spans(decoders.slices(5, position)) == [(0, 2), (2, 5)]
    sliced = run()
    assert torch.equal(whole[0], sliced[0])
    assert torch.equal(whole[1], sliced[1])
