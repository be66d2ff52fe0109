"""Stand-in engines for `DINFER_BATCH_ENGINE=tests.stand_in_engines:NAME`: the real engine's
interface (`tokenizer`, `generate(requests, config, on_result=)`), answers at once,
so tests and benchmarks measure the service, or make the engine misbehave on purpose.

- InstantEngine: answers "42"; `STAND_IN_SECONDS_PER_CALL` (default 0) models engine time,
  with the results finishing one by one over the call, as continuous batching delivers
  them (which decides how often a worker writes).
- PoisonEngine: a call that holds a prompt containing "POISON" raises RuntimeError.
- HangOnceEngine: the first call in the whole test (marked by the file
  `STAND_IN_HANG_MARKER`) hangs for an hour; later calls answer at once.
- HangingLineEngine: every call that holds a prompt containing "HANG" hangs for an hour
  (a line that takes down each worker that runs it, through the watchdog).
- KillingLineEngine: every call that holds a prompt containing "KILL" SIGKILLs its own
  process, as the kernel's OOM killer would (nothing of the process runs afterwards).
- NulEngine: answers NUL_ANSWER, text with a NUL, as a byte-fallback token such as LLaDA's
  <0x00> decodes (which PostgreSQL's text type cannot hold).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any


def prompts_of(requests: Sequence[Any]) -> list[Any]:
    """The prompts of an engine call's requests (dinfer_engine.GenerationRequest, or plain
    prompts)."""
    from dinfer_engine import GenerationRequest

    return [r.prompt if isinstance(r, GenerationRequest) else r for r in requests]


class InstantEngine:
    answer = "42"

    def __init__(self, model: str, device: str) -> None:
        from dinfer_engine.loading.tokenizer import load_tokenizer

        self.tokenizer = load_tokenizer(Path(model))  # without torch: light processes
        self.seconds_per_call = float(os.environ.get("STAND_IN_SECONDS_PER_CALL", "0"))

    def generate(self, requests: Sequence[Any], config: Any = None,
                 on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        from dinfer_engine import GenerationResult

        prompts = prompts_of(requests)
        self.before(prompts)
        results = [GenerationResult(text=self.answer, token_ids=[1, 2], finish_reason="stop",
                                    prompt_tokens=len(p), completion_tokens=2, nfe=1,
                                    seconds=0.0) for p in prompts]
        for index, result in enumerate(results):
            if self.seconds_per_call:
                time.sleep(self.seconds_per_call / len(prompts))
            if on_result:
                on_result(index, result)
        return results

    def constraint_error(self, spec: Any) -> str | None:
        return None  # constraints are not compiled here

    def before(self, prompts: Sequence[Any]) -> None:
        """Hook for the misbehaving engines below."""


class PoisonEngine(InstantEngine):
    def before(self, prompts: Sequence[Any]) -> None:
        if any("POISON" in str(p) for p in prompts):
            raise RuntimeError("the engine cannot digest this prompt")


class HangOnceEngine(InstantEngine):
    def before(self, prompts: Sequence[Any]) -> None:
        marker = Path(os.environ["STAND_IN_HANG_MARKER"])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(3600)


class HangingLineEngine(InstantEngine):
    def before(self, prompts: Sequence[Any]) -> None:
        if any("HANG" in str(p) for p in prompts):
            time.sleep(3600)


class KillingLineEngine(InstantEngine):
    def before(self, prompts: Sequence[Any]) -> None:
        if any("KILL" in str(p) for p in prompts):
            os.kill(os.getpid(), signal.SIGKILL)


NUL_ANSWER = "4\u00002\\u0000"  # a NUL, and the six characters its JSON escape reads as


class NulEngine(InstantEngine):
    answer = NUL_ANSWER


if TYPE_CHECKING:  # mypy (.ci/run) checks that each is what a worker needs
    from dinfer_workers.engine_cache import WorkerEngine

    _checked: list[type[WorkerEngine]] = [InstantEngine, PoisonEngine, HangOnceEngine,
                                          HangingLineEngine, KillingLineEngine,
                                          NulEngine]
