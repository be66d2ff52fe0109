"""benchmarks/gpu_check.sh runs the parts named as arguments alone (a device call lasts 10
minutes at most), every part when none is named, and refuses an unknown name. A stand-in
`python` first on PATH says a GPU is there and records each command instead of running it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"

STAND_IN = """#!/bin/bash
case "$*" in
  *torch.cuda.is_available*) exit 0 ;;
  *device_count*) echo 1; exit 0 ;;
  -) exec {python} - ;;
esac
echo "$*" >> {calls}
echo '{{"ran": true}}'
"""


def check(tmp_path: Path, *parts: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = tmp_path / "calls"
    calls.write_text("")
    (tmp_path / "python").write_text(STAND_IN.format(python=sys.executable, calls=calls))
    (tmp_path / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT), *parts], capture_output=True, text=True,
                          env=env, timeout=60)
    return done, calls.read_text().splitlines()


def test_a_named_part_runs_alone(tmp_path: Path) -> None:
    done, calls = check(tmp_path, "diffusion_gemma")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 4
    assert all("diffusion_gemma" in call for call in calls)
    report = json.loads(done.stdout)
    assert report["diffusion_gemma_released_shape"] == {"exit_code": 0, "ran": True}
    assert report["kernel_tests"] == {"skipped": "not among the parts asked for"}
    assert report["engine_bench"] == {"skipped": "not among the parts asked for"}


def test_every_part_runs_when_none_is_named(tmp_path: Path) -> None:
    done, calls = check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [next(word for word in call.split() if word.endswith(".py")) for call in calls] == [
        "tests/kernels/test_kernels.py", "benchmarks/kernels_bench.py",
        "benchmarks/random_model_bench.py", "benchmarks/random_model_bench.py",
        "benchmarks/kv_cache_bench.py", "benchmarks/diffusion_gemma_bench.py",
        "benchmarks/diffusion_gemma_bench.py", "benchmarks/diffusion_gemma_bench.py",
        "benchmarks/diffusion_gemma_structured_bench.py"]
    assert "skipped" not in json.loads(done.stdout)["kernel_tests"]


def test_an_unknown_part_is_refused_by_name(tmp_path: Path) -> None:
    done, calls = check(tmp_path, "diffusion_gemma", "gemma")
    assert done.returncode == 2
    assert "no part named 'gemma'" in done.stderr and "diffusion_gemma" in done.stderr
    assert calls == []
