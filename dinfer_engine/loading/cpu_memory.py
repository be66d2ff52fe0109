"""Freed tensor memory kept for reuse in a process that runs a model on CPU
(docs/adr/038-draws-where-read.md).

glibc's malloc returns every block above its mmap threshold (128 KB, rising to 32 MB as
blocks are freed) to the kernel when it is freed, so the large tensors a CPU engine makes
and drops every step (a batch's logits alone: rows x positions x vocabulary floats,
hundreds of MB) come back as fresh pages that fault in, zeroed by the kernel, on first
touch: on the benchmark's machine a fifth of a DiffusionGemma run's time. PyTorch's CPU
tuning guide recommends an allocator that keeps freed memory (jemalloc, tcmalloc);
glibc's own keeps it with two settings: blocks under 1 GiB come from the heap, and up to
2 GiB free at the heap's top stay there. The process's resident memory then stays near
its peak, as a worker that owns a model holds it anyway. Elsewhere (no glibc) nothing
changes."""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_MMAP_ABOVE = 1 << 30
_TRIM_ABOVE = (1 << 31) - 1
_kept = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse (once per process); whether it does."""
    global _kept
    if not _kept:
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):
            _kept = bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_ABOVE)) \
                and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE))
    return _kept
