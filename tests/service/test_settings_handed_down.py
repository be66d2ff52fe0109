"""Settings are read once, at a process's entry, and handed down (docs/adr/051): no module
below an entry calls the process-wide `config.settings()`/`reload()`, nor touches
`os.environ`, and the broker (its Celery app) is made by the entries from the settings they
read, never at import. A scan of the product's source keeps it so; two entries in one
process, each on its own broker URL, show it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from click.testing import CliRunner
from starlette.testclient import TestClient

from dinfer_batch.cli import main
from dinfer_batch.server import create_app

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dinfer_batch", "dinfer_workers", "dinfer_engine", "dinfer_kernels")

# the entries that read the environment as their process starts, into Settings.from_env
# (dinfer_batch/config.py), the one parser of DINFER_BATCH_*
ENTRIES = {
    "dinfer_batch/cli/app.py",  # the command line's group
    "dinfer_batch/server.py",  # the API's create_app
}
# variables of other programs, not settings: a child's GPUs, CUDA's and Triton's own
OTHER_PROGRAMS = {
    "dinfer_workers/launcher.py",  # sets CUDA_VISIBLE_DEVICES for the replica it starts
    "dinfer_workers/supervisor.py",  # the GPUs CUDA_VISIBLE_DEVICES gives this node
    "dinfer_kernels/backend.py",  # TRITON_INTERPRET, Triton's interpreter switch
}
# an entry's settings for the processes it starts, whose own entry reads them: uvicorn's
# server processes import `create_app` by name and can be handed nothing but an environment
FOR_CHILDREN = {
    "dinfer_batch/cli/api.py",  # DINFER_BATCH_API_BIND, the address its servers listen on
}
GLOBALS = {"settings", "reload"}
# who makes a broker (its Celery app): the entries, each from the settings it read
BROKER_MAKERS = {
    "Broker": {"dinfer_batch/cli/broker.py",  # a command that publishes or counts permits
               "dinfer_batch/server.py",  # the API's create_app
               "dinfer_batch/fleet/replica.py"},  # a worker process, run_replica
    "make_app": {"dinfer_workers/broker.py"},
    "Celery": {"dinfer_workers/celery_app.py"},
}


def _fetches(tree: ast.AST) -> list[str]:
    """What in this module reads the environment or a process-wide settings object."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("dinfer_batch.config", "os"):
            found += [alias.name for alias in node.names
                      if alias.name in GLOBALS | {"environ", "getenv"}]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                (node.value.id == "os" and node.attr in ("environ", "getenv", "putenv"))
                or (node.value.id == "config" and node.attr in GLOBALS)):
            found.append(f"{node.value.id}.{node.attr}")
    return found


@functools.cache  # parsed once for the tests below
def _modules() -> dict[str, ast.AST]:
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(), str(path))
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _offenders() -> dict[str, list[str]]:
    return {name: fetches for name, tree in _modules().items() if (fetches := _fetches(tree))}


def _calls(tree: ast.AST, names: set[str]) -> tuple[set[str], set[str]]:
    """Which of `names` this module calls, and which of them outside any function (that
    is, when it is imported)."""
    inside: set[int] = {id(node) for function in ast.walk(tree)
                        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
                        for node in ast.walk(function)}
    called, at_import = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in names:
            called.add(node.func.id)
            if id(node) not in inside:
                at_import.add(node.func.id)
    return called, at_import


def test_only_the_entries_read_the_environment_or_fetch_settings():
    allowed = ENTRIES | OTHER_PROGRAMS | FOR_CHILDREN
    assert {name: fetches for name, fetches in _offenders().items()
            if name not in allowed} == {}


def test_the_allowances_name_only_modules_that_still_need_them():
    offenders = _offenders()
    assert sorted((ENTRIES | OTHER_PROGRAMS | FOR_CHILDREN) - offenders.keys()) == []


def test_the_scan_sees_each_way_of_fetching():
    source = ("import os\nfrom dinfer_batch.config import settings\n"
              "from dinfer_batch import config\nconfig.reload()\nos.environ.get('X')\n")
    assert _fetches(ast.parse(source)) == ["settings", "config.reload", "os.environ"]


def test_only_the_entries_make_a_broker_and_none_at_import():
    makers: dict[str, set[str]] = {name: set() for name in BROKER_MAKERS}
    for module, tree in _modules().items():
        called, at_import = _calls(tree, set(BROKER_MAKERS))
        assert at_import == set(), module
        for name in called:
            makers[name].add(module)
    assert makers == BROKER_MAKERS
    assert _calls(ast.parse("app = make_app()\ndef f():\n    Broker()\n"),
                  set(BROKER_MAKERS)) == ({"make_app", "Broker"}, {"make_app"})


UNREACHABLE = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens on port 1


def test_a_command_uses_the_broker_its_environment_names(tmp_path):
    """In-process, after other commands on other brokers: nothing cached from before."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "p"}\n')
    env = {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
           "DINFER_BATCH_BROKER_URL": UNREACHABLE}
    refused = CliRunner().invoke(main, ["submit", str(path)], env=env)
    assert refused.exit_code == 2, refused.output
    assert "redis://:***@127.0.0.1:1/0" in refused.output and "s3cret" not in refused.output


def test_an_api_app_probes_the_broker_its_environment_names(tmp_path, monkeypatch):
    monkeypatch.setenv("DINFER_BATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")
    monkeypatch.setenv("DINFER_BATCH_FILES_DIR", str(tmp_path / "files"))
    monkeypatch.setenv("DINFER_BATCH_BROKER_URL", UNREACHABLE)
    with TestClient(create_app()) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["message"] == "not ready: broker unreachable"

