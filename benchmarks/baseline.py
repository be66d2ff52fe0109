"""A commit of this repository unpacked into a folder (`git archive`), for benchmarks that
measure a baseline commit beside this tree in one run."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def unpack(ref: str, dest: Path) -> Path:
    """The tree of commit `ref` written into `dest` (made if missing); returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
