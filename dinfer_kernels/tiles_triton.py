"""What the Triton kernels share inside their programs."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot(a, w, acc, UPCAST: tl.constexpr):
    """acc + a @ w, accumulated in fp32. UPCAST (under TRITON_INTERPRET=1): the tiles go
    to fp32 first, as the interpreter's bf16 dot is wrong."""
    if UPCAST:
        return acc + tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision="ieee")
    return tl.dot(a, w, acc)
