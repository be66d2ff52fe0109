"""dinfer_engine/loading/cpu_memory.py: once a CPU engine's process keeps freed memory, a large
tensor made again after one was freed faults in no fresh pages (glibc only)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from dinfer_engine.loading.cpu_memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults_of_one_tensor():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(64 << 20)  # 256 MB, freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_one_tensor()
print(min(faults_of_one_tensor() for _ in range(3)))
"""


def faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_tensor_memory_is_reused_without_page_faults() -> None:
    pages = (256 << 20) // 4096
    assert faults("default") > pages // 2  # glibc maps and unmaps such a block each time
    assert faults("keep") < pages // 20
