"""Compile the GPU variants of the Triton kernels down to sm_90 (H100/H200) machine code
without a GPU (ptxas ships with triton), with each kernel's first autotune config; prints
the name of each kernel compiled. Run by tests/kernels/test_kernels.py in a process where
TRITON_INTERPRET is unset: the interpreter never compiles anything.

    python -m tests.compile_kernels
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dinfer_kernels import lm_head_triton, moe_triton

HOPPER = GPUTarget("cuda", 90, 32)
LM_HEAD_SIGNATURE = {
    "hidden_ptr": "*bf16", "weight_ptr": "*bf16", "seeds_ptr": "*i64", "steps_ptr": "*i64",
    "part_max_ptr": "*fp32", "part_sum_ptr": "*fp32", "part_score_ptr": "*fp32",
    "part_token_ptr": "*i64", "part_logit_ptr": "*fp32", "n_rows": "i32", "vocab": "i32",
    "dim": "i32", "chunk": "i32", "banned": "i32", "inv_temperature": "fp32"}
MOE_SIGNATURE = {
    "a_ptr": "*bf16", "w_ptr": "*bf16", "pairs_ptr": "*i64", "block_expert_ptr": "*i64",
    "route_ptr": "*fp32", "n_pairs": "i32", "top_k": "i32", "n_out": "i32", "k_dim": "i32",
    "experts": "i32", "expert_stride": "i32"}


def compile_kernel(name: str, fn: triton.JITFunction, signature: dict[str, str],
                   constants: dict[str, object], config: triton.Config) -> None:
    signature = {**signature, **{arg: "constexpr" for arg in constants}}
    kernel = triton.compile(ASTSource(fn, signature, constants), target=HOPPER,
                            options={"num_warps": config.num_warps,
                                     "num_stages": config.num_stages})
    assert kernel.asm["cubin"], f"{name}: no machine code"
    print(name)


def main() -> None:
    lm_config = lm_head_triton.AUTOTUNE_CONFIGS[0]
    compile_kernel("lm_head", lm_head_triton._lm_head_partials, LM_HEAD_SIGNATURE,
                   {"SAMPLE": True, "UPCAST": False, **lm_config.kwargs}, lm_config)
    moe_config = moe_triton.AUTOTUNE_CONFIGS[0]
    for name, gated, gelu in (("moe_gated", True, False), ("moe_gated_gelu", True, True),
                              ("moe_down", False, False)):
        compile_kernel(name, moe_triton._expert_gemm,
                       {**MOE_SIGNATURE, "out_ptr": "*bf16" if gated else "*fp32"},
                       {"GATED": gated, "UPCAST": False, "GELU": gelu,
                        "BLOCK_M": moe_triton.BLOCK_M, **moe_config.kwargs}, moe_config)


if __name__ == "__main__":
    main()
