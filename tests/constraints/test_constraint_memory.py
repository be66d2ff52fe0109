"""What constrained rows hold at a large vocabulary (issue 47): the peak memory of
`dinfer-batch run` over real-world schema lines (benchmarks/data/jsonschemabench/) on a
random checkpoint of 32,768 tokens grows by at most CONSTRAINED_ROW_BYTES per line
(docs/adr/041-constrained-row-memory.md), measured as the difference between a run of
one line and a run of many, so the model and the process's own memory cancel out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dinfer_engine.decoding.slices import constrained_row_bytes
from tests.json_models import big_vocab_checkpoint

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 32_768
LINES = 33
ANSWER = 32  # tokens: one block

# runs the command given in argv and prints its peak resident memory (bytes)
PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
        "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
        ".ru_maxrss * 1024)")


def schema_lines(count: int) -> list[dict]:
    data = ROOT / "benchmarks" / "data" / "jsonschemabench"
    schemas = [json.loads(line)["schema"] for path in sorted(data.glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    # a schema holding a "\u0000" fails its line at submit (no database stores a NUL as
    # text, ADR 052): such a line would measure nothing
    simple = [s for s in schemas if len(json.dumps(s)) < 4000
              and "\\u0000" not in json.dumps(s)][:count]
    return [{"custom_id": f"line-{i}", "prompt": "answer:", "max_tokens": ANSWER,
             "response_format": {"type": "json_schema",
                                 "json_schema": {"name": f"s{i}", "schema": schema}}}
            for i, schema in enumerate(simple)]


def peak_bytes(checkpoint: Path, lines: list[dict], tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {**os.environ, "DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / name}.db"}
    out = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "dinfer_batch", "run", str(path),
         "--model", str(checkpoint), "-o", str(tmp_path / f"{name}.out.jsonl")],
        check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    answers = [json.loads(line) for line in (tmp_path / f"{name}.out.jsonl").read_text()
               .splitlines()]
    assert len(answers) == len(lines)
    return int(out.stdout.strip())


@pytest.mark.timeout(900)
def test_a_constrained_line_adds_at_most_its_documented_memory(tmp_path):
    checkpoint = big_vocab_checkpoint(tmp_path / "model", size=VOCAB)
    lines = schema_lines(LINES)
    assert len(lines) == LINES
    one = peak_bytes(checkpoint, lines[:1], tmp_path, "one")
    many = peak_bytes(checkpoint, lines, tmp_path, "many")
    per_line = (many - one) / (LINES - 1)
    assert per_line <= constrained_row_bytes(VOCAB, ANSWER), (
        f"{per_line / 2**20:.1f} MB per constrained line, more than documented "
        f"({constrained_row_bytes(VOCAB, ANSWER) / 2**20:.1f} MB)")
