"""Structured outputs on the fused LM head's path (the engine's kernels="triton"; Triton's
interpreter on the CPU): constrained rows project their own logits from the hidden
states, free rows keep the kernel's choice, so greedy tokens equal the torch path's."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # must be set before triton compiles any kernel
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from tests.constraints.test_structured_outputs import SPECS, check_all_valid  # noqa: E402
from tests.engine_requests import asked
from tests.json_models import write_json_model  # noqa: E402

PROMPTS = ["give me json", "x", "q", "tags?", "hi there", "pick", "say", "a", "b", "free text"]


def test_fused_head_path_gives_the_torch_paths_tokens(tmp_path, monkeypatch):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    engine = Engine.from_pretrained(write_json_model(tmp_path / "m"), device=device,
                                    dtype=torch.float32)
    config = GenerationConfig(gen_length=64, block_length=16, steps=16, decoder="threshold",
                              threshold=0.5)
    monkeypatch.setattr(engine, "kernels", "torch")
    reference = engine.generate(asked(PROMPTS, constraints=SPECS), config)
    monkeypatch.setattr(engine, "kernels", "triton")
    fused = engine.generate(asked(PROMPTS, constraints=SPECS), config)
    assert [r.token_ids for r in fused] == [r.token_ids for r in reference]
    check_all_valid(fused, SPECS)
