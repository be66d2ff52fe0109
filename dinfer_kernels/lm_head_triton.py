"""Triton kernel for dinfer_kernels.lm_head.lm_head_confidence.

Grid: (row tiles, vocabulary splits). Each program multiplies its BLOCK_N hidden rows by
one contiguous slice of the head weight, BLOCK_V vocabulary rows at a time (fp32
accumulation over BLOCK_D-wide slices of d), and keeps per row only a running max and
sum of exp (the online log-sum-exp) and the best score so far with its token and logit.
It writes five numbers per (row, split); a few torch ops then combine the splits. The
[N, V] logits exist only as one [BLOCK_N, BLOCK_V] tile in registers. Splitting the
vocabulary gives the GPU enough programs when N is small.

Under TRITON_INTERPRET=1 (CPU tests) tiles are upcast to fp32 right after loading (the
interpreter's bf16 arithmetic and bf16 dot are wrong) and a fixed config replaces the
autotuner. On a GPU, bf16/fp16 tiles go to tl.dot as they are (fp32 accumulation).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dinfer_kernels.backend import interpreting
from dinfer_kernels.counter_rng import MIX_MULTIPLIERS, UNIFORM_SCALE
from dinfer_kernels.tiles_triton import dot

INTERPRET = interpreting()
PLAIN_CONFIG = {"BLOCK_N": 32, "BLOCK_V": 64, "BLOCK_D": 64}
AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_N": n, "BLOCK_V": v, "BLOCK_D": d}, num_warps=w, num_stages=s)
    for n, v, d, w, s in [
        (64, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3),
        (64, 256, 64, 8, 4), (128, 128, 128, 8, 3), (32, 128, 128, 4, 4),
    ]
]
VOCAB_CHUNK_ALIGN = 256  # vocabulary slices start on multiples of this
# jit code may only read globals that are tl.constexpr
MIX_A = tl.constexpr(MIX_MULTIPLIERS[0])
MIX_B = tl.constexpr(MIX_MULTIPLIERS[1])
NOISE_SCALE = tl.constexpr(UNIFORM_SCALE)


@triton.jit
def _mix32(x):
    """lowbias32 on uint32 (dinfer_kernels/counter_rng.py has the torch twin)."""
    x = x ^ (x >> 16)
    x = x * tl.full((), MIX_A, tl.uint32)
    x = x ^ (x >> 15)
    x = x * tl.full((), MIX_B, tl.uint32)
    return x ^ (x >> 16)


@triton.jit
def _row_keys(seeds_ptr, steps_ptr, rows, row_ok):
    """Each row's noise key from its seed and step (counter_rng.py's torch twin)."""
    seeds = tl.load(seeds_ptr + rows, mask=row_ok, other=0)
    steps = tl.load(steps_ptr + rows, mask=row_ok, other=0)
    low = (seeds & 0xFFFFFFFF).to(tl.uint32)
    high = ((seeds >> 32) & 0xFFFFFFFF).to(tl.uint32)
    return _mix32(low ^ _mix32(high ^ _mix32((steps & 0xFFFFFFFF).to(tl.uint32))))


@triton.jit
def _logit_tile(hidden_ptr, weight_ptr, rows, row_ok, cols, col_ok, dim,
                UPCAST: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """One [BLOCK_N, BLOCK_V] tile of logits (fp32), -inf past the slice's end."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), tl.float32)
    for d0 in range(0, dim, BLOCK_D):
        dd = d0 + tl.arange(0, BLOCK_D)
        d_ok = dd < dim
        h = tl.load(hidden_ptr + rows[:, None] * dim + dd[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        w = tl.load(weight_ptr + cols[None, :].to(tl.int64) * dim + dd[:, None],
                    mask=col_ok[None, :] & d_ok[:, None], other=0.0)
        acc = dot(h, w, acc, UPCAST)
    return tl.where(col_ok[None, :], acc, -float("inf"))


@triton.jit
def _lm_head_partials(
    hidden_ptr, weight_ptr, seeds_ptr, steps_ptr,
    part_max_ptr, part_sum_ptr, part_score_ptr, part_token_ptr, part_logit_ptr,
    n_rows, vocab, dim, chunk, banned, inv_temperature,
    SAMPLE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    v_start = split * chunk
    v_end = tl.minimum(v_start + chunk, vocab)
    if SAMPLE:
        keys = _row_keys(seeds_ptr, steps_ptr, rows, row_ok)
    run_max = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    run_sum = tl.zeros((BLOCK_N,), tl.float32)
    best_score = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    best_logit = tl.zeros((BLOCK_N,), tl.float32)
    best_token = tl.zeros((BLOCK_N,), tl.int64)
    for v0 in range(v_start, v_end, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < v_end
        logits = _logit_tile(hidden_ptr, weight_ptr, rows, row_ok, cols, col_ok, dim,
                             UPCAST, BLOCK_N, BLOCK_V, BLOCK_D)
        new_max = tl.maximum(run_max, tl.max(logits, axis=1))
        run_sum = (run_sum * tl.exp(run_max - new_max)
                   + tl.sum(tl.exp(logits - new_max[:, None]), axis=1))
        run_max = new_max
        scores = logits
        if SAMPLE:
            bits = _mix32(keys[:, None] ^ _mix32(cols.to(tl.uint32))[None, :]) >> 8
            noise = (bits.to(tl.float32) + 0.5) * NOISE_SCALE
            scores = logits * inv_temperature - tl.log(-tl.log(noise))
        scores = tl.where(col_ok[None, :] & (cols[None, :] != banned), scores, -float("inf"))
        tile_best = tl.max(scores, axis=1)
        tile_arg = tl.argmax(scores, axis=1, tie_break_left=True)
        picked = tl.arange(0, BLOCK_V)[None, :] == tile_arg[:, None]
        tile_logit = tl.sum(tl.where(picked, logits, 0.0), axis=1)
        better = tile_best > best_score  # strictly: earlier tiles win ties, like argmax
        best_score = tl.where(better, tile_best, best_score)
        best_logit = tl.where(better, tile_logit, best_logit)
        best_token = tl.where(better, v0 + tile_arg.to(tl.int64), best_token)
    out = rows * splits + split
    tl.store(part_max_ptr + out, run_max, mask=row_ok)
    tl.store(part_sum_ptr + out, run_sum, mask=row_ok)
    tl.store(part_score_ptr + out, best_score, mask=row_ok)
    tl.store(part_token_ptr + out, best_token, mask=row_ok)
    tl.store(part_logit_ptr + out, best_logit, mask=row_ok)


_lm_head_partials_tuned = triton.autotune(AUTOTUNE_CONFIGS, key=["vocab", "dim", "SAMPLE"])(
    _lm_head_partials)


def vocabulary_splits(n_rows: int, vocab: int, device: torch.device) -> tuple[int, int]:
    """(splits, chunk): enough programs to fill the GPU twice over when rows are few."""
    programs = 2 * (torch.cuda.get_device_properties(device).multi_processor_count
                    if device.type == "cuda" else 2)
    row_tiles = triton.cdiv(n_rows, 64)
    wanted = max(1, min(64, triton.cdiv(programs, row_tiles)))
    chunk = triton.cdiv(triton.cdiv(vocab, wanted), VOCAB_CHUNK_ALIGN) * VOCAB_CHUNK_ALIGN
    return triton.cdiv(vocab, chunk), chunk


def lm_head_confidence(hidden: torch.Tensor, weight: torch.Tensor, banned: int | None,
                       temperature: float, seeds: torch.Tensor | None,
                       steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Arguments as dinfer_kernels.lm_head.lm_head_confidence, already checked."""
    n, dim = hidden.shape
    vocab = weight.shape[0]
    device = hidden.device
    if n == 0:
        return (torch.empty(0, dtype=torch.long, device=device),
                torch.empty(0, dtype=torch.float32, device=device))
    hidden, weight = hidden.contiguous(), weight.contiguous()
    sample = temperature > 0
    if not sample or seeds is None:  # greedy; lm_head_confidence refuses sampling unseeded
        seeds = torch.zeros(n, dtype=torch.long, device=device)
    splits, chunk = vocabulary_splits(n, vocab, device)
    parts = [torch.empty(n, splits, dtype=torch.float32, device=device) for _ in range(4)]
    part_max, part_sum, part_score, part_logit = parts
    part_token = torch.empty(n, splits, dtype=torch.long, device=device)
    args = (hidden, weight, seeds.long().contiguous(), steps, part_max, part_sum, part_score,
            part_token, part_logit, n, vocab, dim, chunk, -1 if banned is None else banned,
            1.0 / temperature if sample else 1.0)
    upcast = INTERPRET or hidden.dtype == torch.float32
    if INTERPRET:
        grid = (triton.cdiv(n, PLAIN_CONFIG["BLOCK_N"]), splits)
        _lm_head_partials[grid](*args, SAMPLE=sample, UPCAST=upcast, **PLAIN_CONFIG)
    else:
        def tuned_grid(meta: dict) -> tuple[int, int]:
            return triton.cdiv(n, meta["BLOCK_N"]), splits
        _lm_head_partials_tuned[tuned_grid](*args, SAMPLE=sample, UPCAST=upcast)
    global_max = part_max.max(dim=1, keepdim=True).values
    log_normaliser = global_max.squeeze(1) + torch.log(
        (part_sum * torch.exp(part_max - global_max)).sum(dim=1))
    winner = part_score.argmax(dim=1, keepdim=True)  # first split on ties: lowest tokens
    tokens = part_token.gather(1, winner).squeeze(1)
    chosen = part_logit.gather(1, winner).squeeze(1)
    return tokens, torch.exp(chosen - log_normaliser)
