"""Every corpus line (tests/corpus/lines/: copied from public docs and examples, sources in
SOURCES.md) through `dinfer-batch run FILE -o OUT`, each file as it is, on the demo model
and on tiny checkpoints with production tokenizers (tests/tiny_production.py): each line
answers, or is refused by name (tests/corpus/expected.py). The files run in this process through the
command line's entry (the engine loaded once per model); one runs as `python -m
dinfer_batch run`, as a user types it. Lines that do not say how long an answer may be
get 8 tokens (--max-tokens for the whole file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.corpus.corpus_check import LINES, cases, check, corpus_lines, line_id, run_file
from tests.corpus.expected import EXPECTED
from tests.tiny_production import BYTE_LEVEL, SENTENCEPIECE, WRITERS

MODELS = ["demo", SENTENCEPIECE, BYTE_LEVEL]
FILE_OPTIONS = ["--max-tokens", "8"]
Results = Callable[[str, str], dict[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("production")
    return {"demo": "demo"} | {name: str(write(folder / name))
                               for name, write in WRITERS.items()}


@pytest.fixture(scope="module")
def results(checkpoints: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Results:
    """(model, file) -> {custom_id: output line}, each file run once per model."""
    folder = tmp_path_factory.mktemp("corpus_runs")
    done: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

    def run(model: str, name: str) -> dict[str, dict[str, Any]]:
        if (model, name) not in done:
            outputs = run_file(LINES / name, checkpoints[model], folder, *FILE_OPTIONS)
            asked = [line_id(line, i) for i, line in enumerate(corpus_lines(name), 1)]
            assert [o["custom_id"] for o in outputs] == asked  # every line, in order
            done[model, name] = {o["custom_id"]: o for o in outputs}
        return done[model, name]

    return run


@pytest.mark.parametrize("model,name,custom_id", cases(MODELS))
def test_corpus_line_through_the_cli(results: Results, model: str, name: str,
                                     custom_id: str) -> None:
    lines = corpus_lines(name)
    line = next(line for i, line in enumerate(lines, 1) if line_id(line, i) == custom_id)
    check(results(model, name)[custom_id], line, EXPECTED[name][custom_id])


def test_every_corpus_line_has_an_expectation() -> None:
    for path in sorted(LINES.glob("*.jsonl")):
        ids = [line_id(line, i) for i, line in enumerate(corpus_lines(path.name), 1)]
        assert ids == list(EXPECTED[path.name]), path.name


def test_python_m_dinfer_batch_run_as_typed(tmp_path: Path) -> None:
    """The vLLM example file as vLLM's docs ship it, through `python -m dinfer_batch run`
    in a fresh process on the demo model: one line per input line, in order, each
    answered or refused by name."""
    name = "vllm_run_batch_tests.jsonl"
    env = os.environ | {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
                        "XDG_DATA_HOME": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "dinfer_batch", "run", str(LINES / name),
                           "-o", str(tmp_path / "out.jsonl"), *FILE_OPTIONS],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    lines = corpus_lines(name)
    assert [o["custom_id"] for o in outputs] == [line["custom_id"] for line in lines]
    for output, line in zip(outputs, lines, strict=True):
        expect = EXPECTED[name][line["custom_id"]]
        check(output, line, expect)
