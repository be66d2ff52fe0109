"""Settings are read once, at a process's entry, and handed down (docs/adr/051): no module
below an entry calls the process-wide `config.settings()`/`reload()` or the broker's
`broker_settings()`, nor touches `os.environ`. A scan of the product's source keeps it so."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dinfer_batch", "dinfer_workers", "dinfer_engine", "dinfer_kernels")

# where the environment is parsed, and the entries that read it as their process starts
ENTRIES = {
    "dinfer_batch/config.py",  # Settings.from_env, the one parser of DINFER_BATCH_*
    "dinfer_workers/settings.py",  # the broker's two variables
    "dinfer_batch/cli/app.py",  # the command line's group
    "dinfer_batch/server.py",  # the API's create_app
}
# variables of other programs, not settings: a child's GPUs, CUDA's and Triton's own
OTHER_PROGRAMS = {
    "dinfer_workers/launcher.py",  # sets CUDA_VISIBLE_DEVICES for the replica it starts
    "dinfer_workers/supervisor.py",  # the GPUs CUDA_VISIBLE_DEVICES gives this node
    "dinfer_kernels/backend.py",  # TRITON_INTERPRET, Triton's interpreter switch
}
# still fetching the process-wide settings: to be handed them (issue #49); shrinks only
PENDING = {
    "dinfer_batch/cli/api.py",  # tells its server processes the address it listens on
    "dinfer_workers/broker.py", "dinfer_workers/celery_app.py",  # the broker's, on import
}
GLOBALS = {"settings", "reload", "broker_settings"}


def _fetches(tree: ast.AST) -> list[str]:
    """What in this module reads the environment or a process-wide settings object."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (
                "dinfer_batch.config", "dinfer_workers.settings", "os"):
            found += [alias.name for alias in node.names
                      if alias.name in GLOBALS | {"environ", "getenv"}]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                (node.value.id == "os" and node.attr in ("environ", "getenv", "putenv"))
                or (node.value.id == "config" and node.attr in GLOBALS)):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def _offenders() -> dict[str, list[str]]:
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            fetches = _fetches(ast.parse(path.read_text(), str(path)))
            if fetches:
                offenders[path.relative_to(ROOT).as_posix()] = fetches
    return offenders


def test_only_the_entries_read_the_environment_or_fetch_settings():
    allowed = ENTRIES | OTHER_PROGRAMS | PENDING
    assert {name: fetches for name, fetches in _offenders().items()
            if name not in allowed} == {}


def test_the_allowances_name_only_modules_that_still_need_them():
    offenders = _offenders()
    assert sorted((ENTRIES | OTHER_PROGRAMS | PENDING) - offenders.keys()) == []


def test_the_scan_sees_each_way_of_fetching():
    source = ("import os\nfrom dinfer_batch.config import settings\n"
              "from dinfer_batch import config\nconfig.reload()\nos.environ.get('X')\n")
    assert _fetches(ast.parse(source)) == ["settings", "config.reload", "os.environ"]
