"""Counter-based uniform noise: a pure function of (seed, step, vocabulary index).

A row's noise depends only on its own seed and step, never on which rows share the batch
or on how the vocabulary is tiled, so the Triton kernel can draw it tile by tile. The hash
is Chris Wellons' `lowbias32` 32-bit mixer chained over the key's 32-bit words; the same
arithmetic (uint32, wrapping) is written in Triton in dinfer_kernels/lm_head_triton.py. This
torch version emulates uint32 with int64 tensors.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
MIX_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
UNIFORM_SCALE = 2.0 ** -24  # top 24 bits of the hash: exactly representable in fp32


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32) without overflowing int64."""
    low = x * (c & 0xFFFF)
    high = ((x * (c >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, MIX_MULTIPLIERS[0])
    x = x ^ (x >> 15)
    x = _mul32(x, MIX_MULTIPLIERS[1])
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One 32-bit key [N] per row from its int64 seed and step."""
    low, high = seeds & MASK32, (seeds >> 32) & MASK32
    return mix32(low ^ mix32(high ^ mix32(steps & MASK32)))


def uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float32 [N, vocab_size] in (0, 1), strictly: never 0 and never 1."""
    keys = row_keys(seeds.long(), steps.long())
    index = mix32(torch.arange(vocab_size, device=seeds.device, dtype=torch.long))
    bits = mix32(keys[:, None] ^ index[None, :]) >> 8
    return (bits.to(torch.float32) + 0.5) * UNIFORM_SCALE


def position_seeds(request_seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """int64 seeds [B, S] for token positions [B, S] (< 2**31) of requests seeded [B]:
    the position goes into the seed's high word, so distinct positions of one request
    get distinct keys (and, through row_keys' mixing, unrelated noise)."""
    return request_seeds[:, None] ^ (positions << 32)
