"""What constrained rows hold at a large vocabulary (issue 47): the peak memory of
`dinfer-batch run` over real-world schema lines (benchmarks/data/jsonschemabench/) on a
random checkpoint of 32,768 tokens grows by at most constrained_row_bytes per line
(docs/adr/041-constrained-row-memory.md), and with the checkpoint's constraint_memory_mb
set, by at most that budget and a documented cost of the run (RUN_BYTES) however many
lines it holds (docs/adr/047-constrained-row-admission.md); a line whose row alone would pass the
budget fails alone, `constraint_too_large`. Measured as the difference between a run of
one line and a run of many, so the model and the process's own memory cancel out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dinfer_engine.decoding.slices import SLICE_BYTES, constrained_row_bytes
from dinfer_engine.row_budget import MB
from tests.json_models import big_vocab_checkpoint

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 32_768
LINES = 33
ANSWER = 32  # tokens: one block
STEPS = 4  # the budget's runs: eight tokens a step (memory does not depend on it)
BUDGET_MB = 256  # their checkpoint's constraint_memory_mb: 9 rows of 26 MB at once
# what a run holds beyond its rows' budget, however many lines: a slice's float64 scores
# and their exponentials, and the compiled grammars and what the heap keeps of them
# (docs/adr/047-constrained-row-admission.md)
RUN_BYTES = 2 * SLICE_BYTES + 128 * MB

# runs the command given in argv and prints its peak resident memory (bytes)
PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
        "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
        ".ru_maxrss * 1024)")


def schema_lines(count: int, **fields: object) -> list[dict]:
    """`count` lines, the real-world schemas in turn (each line its own prompt, so that
    none is another's duplicate), with `fields` on each."""
    data = ROOT / "benchmarks" / "data" / "jsonschemabench"
    schemas = [json.loads(line)["schema"] for path in sorted(data.glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    # a schema holding a "\u0000" fails its line at submit (no database stores a NUL as
    # text, ADR 052): such a line would measure nothing
    simple = [s for s in schemas if len(json.dumps(s)) < 4000
              and "\\u0000" not in json.dumps(s)]
    return [{"custom_id": f"line-{i}", "prompt": f"answer {i}:", "max_tokens": ANSWER,
             "response_format": {"type": "json_schema", "json_schema": {
                 "name": f"s{i}", "schema": simple[i % len(simple)]}}} | fields
            for i in range(count)]


def peak_bytes(checkpoint: Path, lines: list[dict], tmp_path: Path, name: str) -> int:
    return run_lines(checkpoint, lines, tmp_path, name)[0]


def run_lines(checkpoint: Path, lines: list[dict], tmp_path: Path, name: str,
              settings: dict[str, str] | None = None) -> tuple[int, list[dict]]:
    """The peak resident bytes of `dinfer-batch run` over the lines (with `settings` in
    its environment), and its output."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {**os.environ, "DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / name}.db",
           **(settings or {})}
    out = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "dinfer_batch", "run", str(path),
         "--model", str(checkpoint), "-o", str(tmp_path / f"{name}.out.jsonl")],
        check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    answers = [json.loads(line) for line in (tmp_path / f"{name}.out.jsonl").read_text()
               .splitlines()]
    assert len(answers) == len(lines)
    return int(out.stdout.strip()), answers


@pytest.mark.timeout(900)
def test_a_constrained_line_adds_at_most_its_documented_memory(checkpoint, tmp_path):
    lines = schema_lines(LINES)
    assert len(lines) == LINES
    one = peak_bytes(checkpoint, lines[:1], tmp_path, "one")
    many = peak_bytes(checkpoint, lines, tmp_path, "many")
    per_line = (many - one) / (LINES - 1)
    assert per_line <= constrained_row_bytes(VOCAB, ANSWER), (
        f"{per_line / 2**20:.1f} MB per constrained line, more than documented "
        f"({constrained_row_bytes(VOCAB, ANSWER) / 2**20:.1f} MB)")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_vocab_checkpoint(tmp_path_factory.mktemp("model"), size=VOCAB)


def budgeted(checkpoint: Path, directory: Path, megabytes: int) -> Path:
    """The checkpoint's files under `directory`, its generation_config.json setting
    constraint_memory_mb."""
    directory.mkdir()
    for path in checkpoint.iterdir():
        if path.name != "generation_config.json":
            (directory / path.name).symlink_to(path)
    (directory / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": 1, "constraint_memory_mb": megabytes}))
    return directory


@pytest.mark.timeout(1800)
def test_a_run_of_constrained_lines_holds_the_budget_not_its_lines(checkpoint, tmp_path):
    model = budgeted(checkpoint, tmp_path / "budgeted", BUDGET_MB)
    one = peak_bytes(model, schema_lines(1, steps=STEPS), tmp_path, "one")
    for count in (64, 256):
        above = peak_bytes(model, schema_lines(count, steps=STEPS), tmp_path, f"l{count}") - one
        bound = BUDGET_MB * MB + RUN_BYTES
        assert above <= bound, (f"{count} lines: {above / MB:,.0f} MB above one line's peak, "
                                f"more than the documented {bound / MB:,.0f} MB")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("budget_from", ["checkpoint", "worker setting"])
def test_a_line_whose_row_alone_passes_the_budget_fails_alone(checkpoint, tmp_path,
                                                             budget_from):
    """The budget from the checkpoint's generation_config.json, or from the worker's
    DINFER_BATCH_CONSTRAINT_MEMORY_MB over the checkpoint's larger one."""
    setting = {"DINFER_BATCH_CONSTRAINT_MEMORY_MB": "64"}
    model = budgeted(checkpoint, tmp_path / "budgeted",
                     64 if budget_from == "checkpoint" else 4096)
    lines = schema_lines(3, steps=STEPS)
    lines[1] |= {"max_tokens": 128, "block_length": 128}  # about 100 MB: too large
    _, answers = run_lines(model, lines, tmp_path, "too_large",
                           setting if budget_from == "worker setting" else {})
    assert [a["error"] and a["error"]["code"] for a in answers] == [
        None, "constraint_too_large", None]
    message = answers[1]["error"]["message"]
    assert "constraint_memory_mb" in message and "budget of 64 MB" in message
    assert all(answers[i]["response"]["status_code"] == 200 for i in (0, 2))
