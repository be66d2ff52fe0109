"""The installed program is what these tests run (marker `install`; docs/adr/039): the
README's main command through the console script of this interpreter's environment, from a
folder outside the checkout with no PYTHONPATH; a non-editable `pip install` of the
checkout into a second environment doing the same; `pip check` clean; and no top-level
import name of this distribution shipped by another installed one (issue 45: transformers'
`kernels` shadowed ours). Each run has its own SQLite file and data directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pytest

from tests.service_helpers import read_jsonl

pytestmark = pytest.mark.install

CHECKOUT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "dinfer-batch"
# what a wheel is built from: pyproject.toml's packages and the README it names
SOURCES = ["pyproject.toml", "README.md", "dinfer_batch", "dinfer_workers", "dinfer_engine",
           "dinfer_kernels", "dinfer_training", "dinfer_migrations", "dinfer_models"]


def user_env(folder: Path) -> dict[str, str]:
    """The caller's environment as a user's shell has it: no PYTHONPATH, no DINFER_BATCH_*
    setting; the jobs' database and data directory inside `folder`."""
    env = {name: value for name, value in os.environ.items()
           if name != "PYTHONPATH" and not name.startswith("DINFER_BATCH_")}
    return env | {"XDG_DATA_HOME": str(folder / "data"),
                  "DINFER_BATCH_DATABASE_URL": f"sqlite:///{folder / 'jobs.db'}"}


def run_readme_command(cli: Path, folder: Path) -> None:
    """`dinfer-batch run examples/prompts.jsonl -o results.jsonl` in `folder`: every line
    completed, in order."""
    (folder / "examples").mkdir(parents=True)
    prompts = shutil.copy(CHECKOUT / "examples" / "prompts.jsonl", folder / "examples")
    done = subprocess.run([str(cli), "run", "examples/prompts.jsonl", "-o", "results.jsonl"],
                          cwd=folder, env=user_env(folder), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    asked = [line["custom_id"] for line in read_jsonl(Path(prompts))]
    results = read_jsonl(folder / "results.jsonl")
    assert [line["custom_id"] for line in results] == asked
    assert [line["error"] for line in results if line["error"]] == []
    assert {line["response"]["status_code"] for line in results} == {200}


def top_level_names(distribution: metadata.Distribution) -> set[str]:
    """The import names a distribution installs: its top_level.txt, else the first part of
    each file its RECORD lists (a package's folder, a module's name)."""
    listed = distribution.read_text("top_level.txt")
    if listed:
        return {name.strip() for name in listed.split() if name.strip()}
    names = set()
    for file in distribution.files or []:
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".data")):
            continue
        if len(file.parts) > 1 or first.endswith(".py"):
            names.add(first.removesuffix(".py"))
        elif first.endswith(".so"):
            names.add(first.partition(".")[0])
    return names


def shared_names(ours: set[str], others: Iterable[metadata.Distribution]) -> dict[str, str]:
    """Each of `ours` that another distribution also installs -> that distribution."""
    return {name: other.metadata["Name"] for other in others
            for name in top_level_names(other) & ours}


def test_the_readme_command_runs_through_the_installed_console_script(tmp_path):
    cli = Path(sys.executable).parent / "dinfer-batch"
    assert cli.is_file(), f"{DISTRIBUTION} is not installed in {sys.prefix}"
    outside = tmp_path / "elsewhere"
    assert not outside.is_relative_to(CHECKOUT)
    run_readme_command(cli, outside)


def install_non_editable(root: Path) -> tuple[Path, Path]:
    """A second environment under `root` with the checkout installed non-editable (`pip
    install --no-deps`, as from a wheel); its dependencies are this environment's, through
    a .pth file, so nothing is downloaded. (Its python, its site-packages.)"""
    source = root / "source"  # a copy: building in the checkout would leave build/ there
    source.mkdir(parents=True)
    for name in SOURCES:
        if (CHECKOUT / name).is_dir():
            shutil.copytree(CHECKOUT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(CHECKOUT / name, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    # this environment's site-packages folders (and those its own .pth files add): not
    # the checkout, which pytest put on sys.path
    folders = [entry for entry in sys.path if Path(entry).name in ("site-packages",
                                                                   "dist-packages")]
    (site / "dependencies.pth").write_text("".join(f"{folder}\n" for folder in folders))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-build-isolation", "--no-index", str(source)],
                   check=True, cwd=root, env=user_env(root), timeout=600)
    return python, site


def test_a_non_editable_install_runs_from_its_own_files_and_shares_no_import_name(tmp_path):
    python, site = install_non_editable(tmp_path / "installed")
    outside = tmp_path / "elsewhere"
    run_readme_command(python.parent / "dinfer-batch", outside)
    # the code and the model it ran are the install's, not the checkout's
    found = subprocess.run(
        [str(python), "-c", "import importlib; print(*(importlib.import_module(name).__file__ "
         f"for name in {SOURCES[2:]!r}), sep='\\n')"],
        cwd=outside, env=user_env(outside), check=True, capture_output=True, text=True)
    assert all(Path(file).is_relative_to(site) for file in found.stdout.split()), found.stdout
    model = subprocess.run([str(python.parent / "dinfer-batch"), "model", "demo"], cwd=outside,
                           env=user_env(outside), check=True, capture_output=True, text=True)
    assert f"({site / 'dinfer_models' / 'demo'})" in model.stdout

    # the wheel's RECORD names what it installs (an editable install's names none of it):
    # no other installed distribution ships one of those names
    [wheel] = [d for d in metadata.distributions(path=[str(site)])
               if d.metadata["Name"] == DISTRIBUTION]
    ours = top_level_names(wheel)
    assert ours == set(SOURCES[2:])
    others = [d for d in metadata.distributions() if d.metadata["Name"] != DISTRIBUTION]
    assert shared_names(ours, others) == {}


def test_a_shared_import_name_is_found(tmp_path):
    # the check above can fail: two distributions' records that name one package
    for name in ("clash-one", "clash-two"):
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text("dinfer_engine/__init__.py,,\nclash.py,,\n"
                                     f"{info.name}/METADATA,,\n../../../bin/clash,,\n")
    one, two = sorted(metadata.distributions(path=[str(tmp_path)]),
                      key=lambda d: d.metadata["Name"])
    assert top_level_names(one) == {"dinfer_engine", "clash"}
    assert shared_names({"dinfer_engine", "dinfer_kernels"}, [two]) == {
        "dinfer_engine": "clash-two"}


def test_pip_check_is_clean():
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
