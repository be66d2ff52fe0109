"""Triton kernels for the engine's large-batch hot spots, each beside a PyTorch reference
of the same maths. kernels/backend.py chooses which runs (the engine's `kernels`)."""

from kernels.backend import use_triton
from kernels.lm_head import lm_head_confidence
from kernels.moe import fused_moe

__all__ = ["fused_moe", "lm_head_confidence", "use_triton"]
