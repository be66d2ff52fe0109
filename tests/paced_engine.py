"""A stand-in engine for service tests (`DINFER_BATCH_ENGINE=tests.paced_engine:PacedEngine`):
the real tokenizer, answers after `DINFER_TEST_ITEM_SECONDS` (default 0.2) per request,
one at a time, so a job takes a known time without using the CPU."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tests.stand_in_engines import prompts_of


class PacedEngine:
    def __init__(self, model: str, device: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.seconds = float(os.environ.get("DINFER_TEST_ITEM_SECONDS", "0.2"))

    def generate(self, requests: Sequence[Any], config: Any = None,
                 on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        from dinfer_engine import GenerationResult

        results = []
        for index, prompt in enumerate(prompts_of(requests)):
            time.sleep(self.seconds)
            result = GenerationResult(text=f"echo {prompt}", token_ids=[1, 2],
                                      finish_reason="stop", prompt_tokens=len(prompt),
                                      completion_tokens=2, nfe=1, seconds=self.seconds)
            results.append(result)
            if on_result:
                on_result(index, result)
        return results

    def constraint_error(self, spec: Any) -> str | None:
        return None  # constraints are not compiled here


if TYPE_CHECKING:  # mypy (.ci/run) checks that it is what a worker needs
    from dinfer_workers.engine_cache import WorkerEngine

    _checked: type[WorkerEngine] = PacedEngine
