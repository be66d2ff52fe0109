"""dinfer_engine/ranks/commands.py: a CPU rank's peak memory is its own, not that of the
process that started it (Linux's ru_maxrss starts from the starter's peak)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHILD = ("from torch import nn; from dinfer_engine.ranks.commands import peak_memory_mb; "
         "print(peak_memory_mb(nn.Linear(4, 4)))")
# a starter whose peak is 1 GiB, which it has freed before it starts the rank
STARTER = ("import subprocess, sys, torch; big = torch.ones(256 << 20); del big; "
           "subprocess.run([sys.executable, '-c', sys.argv[1]], check=True)")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux's VmHWM")
def test_a_rank_started_by_a_large_process_reports_its_own_peak() -> None:
    done = subprocess.run([sys.executable, "-c", STARTER, CHILD], capture_output=True,
                          text=True, check=True)
    assert float(done.stdout) < 700  # an interpreter with torch: a few hundred MiB
