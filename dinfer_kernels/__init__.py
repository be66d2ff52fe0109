"""Triton kernels for the engine's large-batch hot spots, each beside a PyTorch reference
of the same maths. dinfer_kernels/backend.py chooses which runs (the engine's `kernels`)."""

from dinfer_kernels.backend import use_triton
from dinfer_kernels.lm_head import lm_head_confidence
from dinfer_kernels.moe import fused_moe

__all__ = ["fused_moe", "lm_head_confidence", "use_triton"]
