"""Triton kernels for dinfer_kernels.moe.fused_moe.

The T*k (token, slot) pairs are sorted by expert and each expert's run is padded to a
multiple of BLOCK_M (`group_by_expert`, torch ops with no host sync), so every BLOCK_M
rows of the sorted list belong to one expert. `_expert_gemm` then runs one launch per
GEMM over grid (row blocks, output column tiles):

- gated (x @ w13[e].T): each program computes the gate tile and the matching up tile
  together and stores act(gate) * up, so the [pairs, 2I] product is never written
  (act: SiLU, or GELU-tanh as x * sigmoid(2z), z its tanh argument: the same function);
- down (act @ w2[e].T): scaled by the pair's routing weight, stored in fp32 per pair;
  the k slots of a token are then summed by torch (deterministic, no atomics).

Under TRITON_INTERPRET=1 tiles are upcast after loading and one fixed config runs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dinfer_kernels.backend import interpreting
from dinfer_kernels.tiles_triton import dot

INTERPRET = interpreting()
BLOCK_M = 16 if INTERPRET else 64
PLAIN_CONFIG = {"BLOCK_N": 32, "BLOCK_K": 64}
AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
    for n, k, w, s in [(64, 64, 4, 4), (128, 64, 4, 4), (128, 64, 8, 3), (256, 64, 8, 3),
                       (128, 128, 8, 3)]
]


def group_by_expert(topk_ids: torch.Tensor, experts: int,
                    block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted_pairs, block_expert): pair indices (t * k + j) grouped by expert, each
    expert's run padded with the sentinel T*k to a multiple of block_m; and the expert of
    each block_m rows (`experts` for blocks past the end). Sized for the worst case so
    that nothing waits on the GPU."""
    flat = topk_ids.flatten()
    pairs = flat.numel()
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(pairs, device=flat.device) - (counts.cumsum(0) - counts)[expert_of]
    blocks = triton.cdiv(pairs + experts * (block_m - 1), block_m)
    sorted_pairs = torch.full((blocks * block_m,), pairs, dtype=torch.long, device=flat.device)
    sorted_pairs[(padded_end - padded)[expert_of] + rank] = order
    starts = torch.arange(blocks, device=flat.device) * block_m
    block_expert = torch.searchsorted(padded_end, starts, right=True)
    return sorted_pairs, block_expert


@triton.jit
def _expert_gemm(
    a_ptr, w_ptr, out_ptr, pairs_ptr, block_expert_ptr, route_ptr,
    n_pairs, top_k, n_out, k_dim, experts, expert_stride,
    GATED: tl.constexpr, UPCAST: tl.constexpr, GELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert >= experts:
        return
    pairs = tl.load(pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    pair_ok = pairs < n_pairs
    a_rows = pairs // top_k if GATED else pairs
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_out
    w_base = w_ptr + expert.to(tl.int64) * expert_stride
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < k_dim
        a = tl.load(a_ptr + a_rows[:, None] * k_dim + kk[None, :],
                    mask=pair_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = col_ok[None, :] & k_ok[:, None]
        w = tl.load(w_base + cols[None, :] * k_dim + kk[:, None], mask=w_mask, other=0.0)
        acc = dot(a, w, acc, UPCAST)
        if GATED:  # the up rows sit n_out (= I) rows below the gate rows
            w_up = tl.load(w_base + (cols[None, :] + n_out) * k_dim + kk[:, None],
                           mask=w_mask, other=0.0)
            acc_up = dot(a, w_up, acc_up, UPCAST)
    if GATED and GELU:  # 0.5 x (1 + tanh(z)) = x sigmoid(2 z)
        z = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        result = acc * tl.sigmoid(2.0 * z) * acc_up
    elif GATED:
        result = acc * tl.sigmoid(acc) * acc_up
    else:
        result = acc * tl.load(route_ptr + pairs, mask=pair_ok, other=0.0)[:, None]
    tl.store(out_ptr + pairs[:, None] * n_out + cols[None, :],
             result.to(out_ptr.dtype.element_ty), mask=pair_ok[:, None] & col_ok[None, :])


_expert_gemm_tuned = triton.autotune(AUTOTUNE_CONFIGS, key=["n_out", "k_dim", "GATED",
                                                             "GELU"])(
    _expert_gemm)


def _launch(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, sorted_pairs: torch.Tensor,
            block_expert: torch.Tensor, route: torch.Tensor, top_k: int, gated: bool,
            gelu: bool = False) -> None:
    experts, rows, k_dim = w.shape
    n_out = rows // 2 if gated else rows
    blocks = block_expert.numel()
    args = (a, w, out, sorted_pairs, block_expert, route, route.numel(), top_k, n_out, k_dim,
            experts, rows * k_dim)
    upcast = INTERPRET or a.dtype == torch.float32
    if INTERPRET:
        grid = (blocks, triton.cdiv(n_out, PLAIN_CONFIG["BLOCK_N"]))
        _expert_gemm[grid](*args, GATED=gated, UPCAST=upcast, GELU=gelu, BLOCK_M=BLOCK_M,
                           **PLAIN_CONFIG)
    else:
        def tuned_grid(meta: dict) -> tuple[int, int]:
            return blocks, triton.cdiv(n_out, meta["BLOCK_N"])
        _expert_gemm_tuned[tuned_grid](*args, GATED=gated, UPCAST=upcast, GELU=gelu,
                                       BLOCK_M=BLOCK_M)


def fused_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
              topk_weights: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """Arguments as dinfer_kernels.moe.fused_moe, already checked."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    if tokens == 0:
        return torch.zeros_like(x)
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    route = topk_weights.float().flatten().contiguous()
    sorted_pairs, block_expert = group_by_expert(topk_ids.long(), w13.shape[0], BLOCK_M)
    act = torch.empty(tokens * top_k, w2.shape[2], dtype=x.dtype, device=x.device)
    _launch(x, w13, act, sorted_pairs, block_expert, route, top_k, gated=True,
            gelu=activation == "gelu_tanh")
    down = torch.empty(tokens * top_k, hidden, dtype=torch.float32, device=x.device)
    _launch(act, w2, down, sorted_pairs, block_expert, route, top_k, gated=False)
    return down.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)
