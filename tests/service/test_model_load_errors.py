"""A model that cannot be loaded fails its job once, with why and what to do: a failed
import names its module and the distribution that installed it (dinfer_workers/load_failure.py),
and each request says it was not run and points to the job's error. Real failing imports,
through the installed `dinfer-batch run`."""

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from dinfer_workers.load_failure import explain
from tests.service_helpers import read_jsonl, write_jsonl

CLI = Path(sys.executable).parent / "dinfer-batch"
CHECKOUT = Path(__file__).resolve().parents[2]


def failure(source: str) -> BaseException:
    try:
        exec(source, {})
    except Exception as exc:  # noqa: BLE001 - the failure is what the test reads
        return exc
    raise AssertionError(f"{source!r} did not fail")


def test_an_import_from_another_distribution_names_it_and_its_version():
    message = explain(failure("from safetensors import fused_moe"))
    assert message.startswith("ImportError: cannot import name 'fused_moe' from 'safetensors'. ")
    assert f"distribution safetensors {metadata.version('safetensors')}" in message
    assert "two distributions ship the import name safetensors: uninstall safetensors" in message


def test_a_module_nothing_provides_says_to_reinstall_with_dependencies():
    message = explain(failure("import dinfer_no_such_part"))
    assert "No installed distribution provides the module dinfer_no_such_part" in message
    assert "pip install --force-reinstall dinfer-batch" in message


def test_a_missing_part_of_this_project_says_to_reinstall_it():
    message = explain(failure("import dinfer_engine.no_such_part"))
    assert "The module dinfer_engine.no_such_part is part of dinfer-batch" in message
    assert "reinstall it" in message


def test_a_module_that_raises_as_it_is_imported_is_named(tmp_path, monkeypatch):
    (tmp_path / "dinfer_raises_on_import.py").write_text("raise RuntimeError('no GPU')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = explain(failure("import dinfer_raises_on_import"))
    assert message.startswith("RuntimeError: no GPU. The module dinfer_raises_on_import "
                              "comes from no installed distribution")


def test_an_import_name_two_distributions_ship_is_a_clash(tmp_path, monkeypatch):
    package = tmp_path / "dinfer_clashing"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("clash-one", "clash-two"):  # two installed distributions, one import name
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "top_level.txt").write_text("dinfer_clashing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = explain(failure("from dinfer_clashing import fused_moe"))
    assert ("The import name dinfer_clashing is shipped by several installed distributions "
            "(clash-one 1.0, clash-two 1.0)") in message


def test_run_with_a_model_whose_import_fails_fails_the_job_once(tmp_path):
    # an engine whose module imports a name its dependency lacks: issue 45's failure
    (tmp_path / "dinfer_broken_family.py").write_text(
        "from safetensors import fused_moe\n\n\ndef load(model, device):\n"
        "    raise AssertionError('not reached')\n")
    lines = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"{n} + 1 ="} for n in range(3)])
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("DINFER_BATCH_") or name.startswith("DINFER_BATCH_TEST_")}
    env |= {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(CHECKOUT)]),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
            "DINFER_BATCH_ENGINE": "dinfer_broken_family:load"}
    done = subprocess.run([str(CLI), "run", str(lines), "-o", str(tmp_path / "out.jsonl")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    job_error = done.stderr.strip().splitlines()[-1]
    assert "ended failed: cannot load the model demo: ImportError: cannot import name " \
           "'fused_moe' from 'safetensors'" in job_error
    assert f"distribution safetensors {metadata.version('safetensors')}" in job_error
    assert str(tmp_path) not in job_error  # no server path
    assert [line["error"] for line in read_jsonl(tmp_path / "out.jsonl")] == [{
        "code": "model_not_loaded",
        "message": "not run: the model demo could not be loaded (the job's error says why)",
    }] * 3
