"""The prefix cache through the service: lines sharing a prompt prefix on a tiny LLaDA2
report the prompt tokens they reused in their metrics, and their texts are those of a
worker without the cache (DINFER_BATCH_PREFIX_CACHE_MB=0), which reports nothing."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from dinfer_batch.cli import main
from tests.service_helpers import read_jsonl, write_jsonl
from tests.tiny_moe import write_tiny_moe

pytest_plugins = ["tests.service_fixtures"]

SHARED = "you answer in one word. question: "


def run_lines(service, checkpoint: Path, lines: list[dict], out: Path,
              megabytes: str) -> list[dict]:
    result = CliRunner().invoke(main, [
        "run", str(write_jsonl(out.with_suffix(".in.jsonl"), lines)), "-o", str(out),
        "--model", str(checkpoint), "--max-tokens", "8", "--block-length", "8"],
        env=service.env | {"DINFER_BATCH_PREFIX_CACHE_MB": megabytes})
    assert result.exit_code == 0, result.output
    return [line["response"]["body"] for line in read_jsonl(out)]


def test_lines_sharing_a_prefix_report_reused_tokens(sqlite_service, tmp_path):
    checkpoint = write_tiny_moe(tmp_path / "llada2", "llada2")
    lines = [{"prompt": SHARED + tail} for tail in ("cats?", "dogs?", "the sea?", "rain?")]
    lines.append({"prompt": "a prompt of its own, long enough for blocks"})
    on = run_lines(sqlite_service, checkpoint, lines, tmp_path / "on.jsonl", "64")
    off = run_lines(sqlite_service, checkpoint, lines, tmp_path / "off.jsonl", "0")
    assert [b["choices"][0]["text"] for b in on] == [b["choices"][0]["text"] for b in off]
    reused = [b["metrics"]["prefix_tokens_reused"] for b in on]
    whole = len(SHARED) // 8 * 8  # the shared whole blocks (at least; one row computes them)
    first, *others = sorted(reused[:4])
    assert first == 0 and whole > 0 and all(r >= whole for r in others)
    assert reused[4] == 0
    assert all("prefix_tokens_reused" not in b["metrics"] for b in off)


def test_a_bad_budget_is_a_usage_error(sqlite_service, tmp_path, monkeypatch):
    for value in ("abc", "-1", "1.5"):
        monkeypatch.setenv("DINFER_BATCH_PREFIX_CACHE_MB", value)
        result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
        assert result.exit_code == 2, result.output
        assert f"DINFER_BATCH_PREFIX_CACHE_MB={value!r} must be an integer >= 0" in result.output
    assert sqlite_service.cli("list", "--json").output == ""
