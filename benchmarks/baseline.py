"""A commit of this repository unpacked into a folder (`git archive`), for benchmarks that
measure a baseline commit beside this tree in one run."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def unpack(ref: str, dest: Path) -> Path:
    """The tree of commit `ref` written into `dest` (made if missing); returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def make_job_spec(model: str, params: dict[str, Any], model_dir: Path, **options: Any) -> Any:
    """`dinfer_batch.jobs.create.make_spec` in whichever tree's code runs: since #55 it
    takes the job's options as one `JobOptions`, before as keywords (`metadata` required)."""
    from dinfer_batch.jobs.create import make_spec

    try:
        from dinfer_batch.jobs.spec import JobOptions
    except ImportError:
        return make_spec(model, params, model_dir=model_dir, **{"metadata": {}, **options})
    return make_spec(model, params, JobOptions(**options), model_dir)
