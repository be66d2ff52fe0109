"""`dinfer-batch run` and `dinfer-batch model` on a DiffusionGemma checkpoint
(docs/adr/027-diffusion-gemma.md): its fields per line, the refusals per line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service_fixtures import _service
from tests.service_helpers import read_jsonl, write_jsonl
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp("gemma"))


@pytest.fixture
def gemma_service(sqlite_url: str, gemma_dir: Path) -> Iterator[Any]:
    yield from _service(sqlite_url, gemma_dir)


def test_run_answers_lines_and_refuses_what_the_family_cannot_do(gemma_service: Any,
                                                                  gemma_dir: Path,
                                                                  tmp_path: Path) -> None:
    from dinfer_engine import Engine, GenerationConfig

    lines = [
        {"custom_id": "plain", "prompt": "abc", "max_tokens": 16, "seed": 3, "t_min": 0.3},
        {"custom_id": "decoder", "prompt": "abc", "decoder": "threshold"},
        {"custom_id": "cache", "prompt": "abc", "cache": "dual"},
        {"custom_id": "infill", "prompt": "ab", "suffix": "cd"},
        {"custom_id": "structured", "prompt": "abc",
         "response_format": {"type": "json_object"}},
        {"custom_id": "image", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        {"custom_id": "schedule", "prompt": "abc", "t_min": 0.9, "t_max": 0.5},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = gemma_service.cli("run", path, "-o", out, "--errors", errors,
                               "--max-denoising-steps", "4")  # the job's, the line's t_min
    assert result.exit_code == 0, result.output
    [ok] = read_jsonl(out)
    expected = Engine.from_pretrained(gemma_dir).generate(
        ["abc"], GenerationConfig(gen_length=16, max_denoising_steps=4, t_min=0.3),
        seeds=[3])[0]
    assert ok["custom_id"] == "plain"
    assert ok["response"]["body"]["choices"][0]["text"] == expected.text
    assert ok["response"]["body"]["metrics"]["nfe"] == expected.nfe
    failed = {line["custom_id"]: line["error"]["message"] for line in read_jsonl(errors)}
    assert "decoder does not apply to DiffusionGemma" in failed["decoder"]
    assert "cache does not apply to DiffusionGemma" in failed["cache"]
    assert "infill (suffix)" in failed["infill"]
    assert "structured outputs are not supported on DiffusionGemma" in failed["structured"]
    assert "no images" in failed["image"]
    assert "t_min and t_max" in failed["schedule"]
    assert len(failed) == len(lines) - 1


def test_model_shows_the_family_and_its_canvas_defaults(gemma_service: Any) -> None:
    shown = gemma_service.cli("model").output
    assert "family   DiffusionGemma" in shown
    assert "max_denoising_steps 10" in shown and "entropy_bound 0.5" in shown
    defaults = json.loads(gemma_service.cli("model", "--json").output)["defaults"]
    assert defaults["confidence_threshold"] == 0.1 and defaults["t_max"] == 0.8
