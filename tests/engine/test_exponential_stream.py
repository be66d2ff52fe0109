"""dinfer_engine/canvas/exponential.py: draws made in numpy from a CPU generator's own state are
torch's `exponential_` floats, skipped draws leave the generator where torch leaves it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dinfer_engine.canvas import exponential
from dinfer_engine.canvas.exponential import advance, near_midpoint, stream


def torch_draws(generator: torch.Generator, count: int) -> np.ndarray:
    return torch.empty(count).exponential_(generator=generator).numpy()


@pytest.mark.parametrize("handed_over", [1, exponential.TORCH_SKIP])
@pytest.mark.parametrize("seed, offset", [(0, 0), (7, 311), (2**40 + 3, 623), (5, 624),
                                          (11, 100_000)])
def test_taken_and_skipped_draws_are_torchs(seed: int, offset: int, handed_over: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Draws from any position in the mt19937 state (before and at its twists), taken in
    runs between skipped ones, equal torch's, whether the skips stay in numpy or go
    through torch (from `handed_over` draws on); the generator then goes on as torch's."""
    monkeypatch.setattr(exponential, "TORCH_SKIP", handed_over)
    ours, theirs = (torch.Generator().manual_seed(seed) for _ in range(2))
    for generator in (ours, theirs):  # an earlier use of the generator: any offset
        torch.randint(0, 10, (offset,), generator=generator)
    runs = [(0, 5), (3, 1000), (40_000, 312), (1, 1), (0, 250_000)]
    draws = stream(ours)
    assert draws is not None
    for skipped, taken in runs:
        draws.skip(skipped)
        expected = torch_draws(theirs, skipped + taken)[skipped:]
        np.testing.assert_array_equal(draws.take(taken), expected)
    draws.skip(777)
    draws.close()
    torch_draws(theirs, 777)
    assert torch.equal(ours.get_state(), theirs.get_state())
    assert torch.equal(torch.rand(9, generator=ours), torch.rand(9, generator=theirs))


@pytest.mark.parametrize("count", [0, 1, 624, (1 << 16) - 1, 1 << 16, (1 << 17) + 5])
def test_advance_leaves_the_generator_where_exponential_leaves_it(count: int) -> None:
    ours, theirs = torch.Generator().manual_seed(count), torch.Generator().manual_seed(count)
    torch.rand(3, generator=ours), torch.rand(3, generator=theirs)  # mid-state
    advance(ours, count)
    torch_draws(theirs, count)
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_many_draws_equal_torchs_bit_for_bit() -> None:
    """Four million draws: numpy's log1p differs from the C library's in the last bit of
    ~7% of doubles; the float32 draws still equal torch's, all of them."""
    ours, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    draws = stream(ours)
    assert draws is not None
    np.testing.assert_array_equal(draws.take(4_000_000), torch_draws(theirs, 4_000_000))


def test_near_midpoint_flags_doubles_that_could_round_either_way() -> None:
    one = np.float32(1.5)
    gap = float(np.nextafter(one, np.float32(2)) - one)
    doubles = np.array([1.5, 1.5 + gap / 2, 1.5 + gap / 2 - 1e-15, 1.5 + gap / 4,
                        1.5 - gap / 2 + 1e-16])
    rounded = doubles.astype(np.float32)
    assert near_midpoint(doubles, rounded).tolist() == [False, True, True, False, True]


def test_only_cpu_generators_have_a_stream() -> None:
    assert stream(torch.Generator()) is not None
    if torch.cuda.is_available():
        assert stream(torch.Generator("cuda")) is None
