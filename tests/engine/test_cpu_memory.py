"""dinfer_engine/loading/cpu_memory.py: once a CPU engine's process keeps freed memory, a large
tensor comes from the heap, not from a mapping of its own; freed, it stays in the process,
which stops growing, and a tensor made again faults in no fresh pages (glibc only).

glibc may place the second block beside the first once (a small allocation can split the
freed top), so the pages are counted over several tensors, not the first few."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import pytest

PROBE = """
import ctypes, json, resource, sys, torch
from dinfer_engine.loading.cpu_memory import keep_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_freed_memory()
runs = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tensor = torch.ones(64 << 20)  # 256 MB
    mapped = libc.mallinfo2().hblkhd
    del tensor
    runs.append({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before,
                 "mapped": mapped, "heap": libc.mallinfo2().arena})
print(json.dumps(runs))
"""
TENSOR = 256 << 20
PAGES = TENSOR // 4096


def runs(mode: str) -> list[dict[str, int]]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc >= 2.33")
def test_freed_tensor_memory_is_kept_and_reused() -> None:
    default = runs("default")
    assert all(run["mapped"] >= TENSOR for run in default)  # its own mapping each time
    assert min(run["faults"] for run in default) > PAGES // 2  # unmapped when freed
    kept = runs("keep")
    assert all(run["mapped"] < TENSOR for run in kept)  # from the heap
    assert kept[-1]["heap"] <= 3 * TENSOR, kept  # freed blocks reused: the heap stops growing
    assert min(run["faults"] for run in kept[1:]) < PAGES // 20, kept
