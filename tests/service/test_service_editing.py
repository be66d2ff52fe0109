"""The editing decoder through the service: per-line editing fields and presets, and each
line's metrics carrying the tokens edited and the post-steps run beside nfe
(`dinfer-batch run` on a tiny LLaDA2.1 checkpoint, SQLite)."""

from __future__ import annotations

import pytest

from dinfer_engine import Engine, GenerationConfig
from tests.engine_requests import asked
from tests.service_helpers import read_jsonl, write_jsonl
from tests.tiny_moe import write_tiny_moe


def test_lines_report_edits_and_post_steps(sqlite_service, tmp_path):
    checkpoint = write_tiny_moe(tmp_path / "llada21", "llada2", model_type="llada21_moe")
    lines = [
        {"prompt": "abc"},  # the family's default decoder: editing
        {"prompt": "hello", "preset": "speed", "n": 2, "temperature": 1.0},
        {"prompt": "xyz", "decoder": "threshold"},
        {"prompt": "q", "preset": "speed", "decoder": "credit"},
    ]
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out,
                                "--errors", errors, "--model", checkpoint,
                                "--max-tokens", "16", "--block-length", "8")
    assert result.exit_code == 0, result.output
    default, speed, threshold = (line["response"]["body"]["metrics"]
                                 for line in read_jsonl(out))
    engine = Engine.from_pretrained(checkpoint)
    config = GenerationConfig(gen_length=16, block_length=8)
    alone = engine.generate(["abc"], config)[0]
    assert (default["nfe"], default["edited_tokens"], default["post_steps"]) == (
        alone.nfe, alone.edited_tokens, alone.post_steps)
    samples = engine.generate(asked(["hello"] * 2, seeds=speed["seeds"]), GenerationConfig(
        gen_length=16, block_length=8, preset="speed", temperature=1.0))
    assert speed["edited_tokens"] == sum(s.edited_tokens or 0 for s in samples)
    assert speed["post_steps"] == sum(s.post_steps or 0 for s in samples) > 0
    assert "edited_tokens" not in threshold and "post_steps" not in threshold
    [failed] = read_jsonl(errors)
    assert failed["error"]["code"] == "invalid_request"
    assert "line 4" in failed["error"]["message"]
    assert "preset 'speed' is the editing decoder's" in failed["error"]["message"]


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--preset", "turbo", "'turbo' is not one of 'speed', 'quality'"),
    ("--editing-threshold", "2", "editing_threshold must be a number in [0, 1]"),
    ("--num-to-transfer", "0", "num_to_transfer must be a positive integer"),
])
def test_bad_job_options_are_refused(sqlite_service, tmp_path, option, value, message):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}])
    result = sqlite_service.cli("run", path, option, value)
    assert result.exit_code == 2 and message in result.output, result.output
