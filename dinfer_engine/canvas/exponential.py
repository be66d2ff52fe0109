"""Exp(1) draws bit-identical to torch's CPU `Tensor.exponential_`, made only where a step
reads them (docs/adr/038-draws-where-read.md).

A DiffusionGemma step samples every canvas position from one exponential draw per
vocabulary entry (the reference's `multinomial`), yet keeps the samples of its accepted
positions only, and none at a canvas's last step. torch's CPU kernel makes each draw in
turn from the generator's mt19937: two 32-bit outputs, 53 bits of them as a double u,
-log1p(-u), cast to the tensor's dtype. `ExponentialStream` reads the same mt19937 state
in numpy, so a step skips the draws it does not read (the generator only advances past
them: a third of the cost) and makes the rest in bulk, then hands the state back: the
generator ends where `exponential_` would leave it, and every draw made is the same
float. A long skip goes through torch's own generator instead (`advance`): its int64
`random_` passes the two outputs of a draw per value faster than numpy's loop, for a
fixed cost of handing the state over and back (docs/adr/054-draws-nobody-reads.md).
numpy's log1p (SIMD) may differ from the C library's in the last bit of a double; a draw
whose double lies that close to a float32 rounding midpoint is recomputed with the C
library's, so the float32 draws are exact, not nearly so.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_STATE_WORDS = 624  # mt19937's state
_STATE_BYTES = 5056  # CPUGeneratorImplState: the legacy mt19937 record and a normal sample
_LEFT_AT, _NEXT_AT, _STATE_AT = 8, 16, 24  # byte offsets in get_state()'s legacy layout
_LOW_BITS = (1 << 21) - 1  # the first output's bits among a double's 53
# numpy's log1p lies within a few units in the last place of a double; a margin of 2^-44
# (relative) holds thousands of them
_MARGIN = 2.0 ** -44
# draws from which a skip hands the state to torch and back (`advance`): past the fixed
# cost of the two hand-overs
TORCH_SKIP = 1 << 16
# int64 values `advance` makes at once: a buffer that stays in a core's L2 cache
_ADVANCE_CHUNK = 1 << 16


class ExponentialStream:
    """The exponential draws of a CPU `generator`, in order, from its current state
    `state` (its get_state()). `close()` writes the state back; until then the generator
    must not be used."""

    def __init__(self, generator: torch.Generator, state: torch.Tensor) -> None:
        self.generator = generator
        self._load(state)

    def _load(self, state: torch.Tensor) -> None:
        """Start numpy's MT19937 from the generator's state bytes `state`."""
        self.state = state
        raw = state.numpy()
        left = int(raw[_LEFT_AT:_LEFT_AT + 4].view(np.int32)[0])
        words = raw[_STATE_AT:_STATE_AT + 8 * _STATE_WORDS].view(np.uint64)
        self.bits = np.random.MT19937()
        # torch twists when `left` falls to 0; numpy when its position reaches 624
        self.bits.state = {"bit_generator": "MT19937",
                           "state": {"key": words.astype(np.uint32), "pos": 625 - left}}

    def skip(self, count: int) -> None:
        """Advance past `count` draws (from TORCH_SKIP on, in torch: `advance`)."""
        if count < TORCH_SKIP:
            self.bits.random_raw(2 * count, output=False)
            return
        self.close()
        advance(self.generator, count)
        self._load(self.generator.get_state())

    def take(self, count: int) -> np.ndarray:
        """The next `count` draws, float32."""
        raw = self.bits.random_raw(2 * count)
        whole = (raw[0::2] & _LOW_BITS) << 32
        whole |= raw[1::2]
        u = whole.astype(np.float64)
        u *= 2.0 ** -53
        approx = np.log1p(-u)
        approx *= -1.0
        approx += 0.0  # -0.0 -> 0.0, as -1.0 * log1p(-0.0) is
        draws = approx.astype(np.float32)
        for i in np.flatnonzero(near_midpoint(approx, draws)):
            draws[i] = np.float32(-1.0 * math.log1p(-u[i]) + 0.0)
        return draws

    def close(self) -> None:
        state = self.bits.state["state"]
        raw = self.state.numpy()
        raw[_LEFT_AT:_LEFT_AT + 4].view(np.int32)[0] = 625 - state["pos"]
        raw[_NEXT_AT:_NEXT_AT + 8].view(np.uint64)[0] = state["pos"]
        raw[_STATE_AT:_STATE_AT + 8 * _STATE_WORDS].view(np.uint64)[:] = state["key"]
        self.generator.set_state(self.state)


def advance(generator: torch.Generator, count: int) -> None:
    """Move a CPU mt19937 `generator` past `count` exponential draws without making them:
    torch's int64 `random_` takes two 32-bit outputs per value, as a draw does
    (tests/engine/test_exponential_stream.py compares the states), in a loop with nothing
    but the generator's own (numpy's `random_raw` calls a function per output)."""
    buffer = torch.empty(min(count, _ADVANCE_CHUNK), dtype=torch.int64)
    for start in range(0, count, _ADVANCE_CHUNK):
        buffer[:count - start].random_(generator=generator)


def near_midpoint(approx: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """Where a double within _MARGIN (relative) of `approx` could round to another float32
    than `rounded` (approx's own rounding)."""
    here = rounded.astype(np.float64)
    below = (here + np.nextafter(rounded, np.float32(-np.inf)).astype(np.float64)) / 2
    above = (here + np.nextafter(rounded, np.float32(np.inf)).astype(np.float64)) / 2
    reach = np.abs(approx) * _MARGIN
    return (approx - below < reach) | (above - approx < reach)


def stream(generator: torch.Generator) -> ExponentialStream | None:
    """`generator`'s stream, or None where it would not reproduce its exponential_: not a
    CPU mt19937 (CUDA's Philox draws differently and stays with torch)."""
    if generator.device.type != "cpu":
        return None
    state = generator.get_state()  # read once: the stream starts from it
    return ExponentialStream(generator, state) if state.numel() == _STATE_BYTES else None
