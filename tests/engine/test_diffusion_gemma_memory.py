"""DiffusionGemma's step in bounded memory (docs/adr/042-bounded-step-memory.md): at the
released vocabulary (262,144) and canvas (256) a batch of 64 never makes a
[rows, canvas, vocabulary] tensor and peaks under PEAK_BOUND; its rows are their batch-1
runs, which are transformers' `generate`; slicing a step canvas by canvas changes no
token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import torch

from dinfer_engine.canvas import uniform
from tests.engine.test_engine_diffusion_gemma import hf_generate, prompt_for, run_rows
from tests.tiny_diffusion_gemma import GENERATION_CONFIG, write_tiny_diffusion_gemma
from tests.tiny_model import EOS_ID

VOCAB, CANVAS, ROWS = 262_144, 256, 64
STEPS = 3  # two sampling steps (the second self-conditioned), then the last
BATCH_STEPS = 2  # the batch of 64: one sampling step, then the last (time)
# the batch process's own peak resident memory (VmHWM, not ru_maxrss, which starts from
# the parent's peak): the process (torch, the checkpoint, the decoder's activations, what
# glibc keeps of freed blocks for reuse: dinfer_engine/loading/cpu_memory.py), under
# 1 GiB, and one slice of canvas x vocabulary fp32 values, three times for the
# temporaries beside it and what the heap keeps (1.06-1.57 GB seen); `largest` is the
# exact check
PEAK_BOUND = (1 << 30) + 3 * uniform.rows_per_slice(CANVAS, VOCAB, uniform.STEP_BUDGET) \
    * CANVAS * VOCAB * 4
CHECKED = (0, 37, 63)  # rows compared with their batch-1 runs

BATCH = """
import json, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from dinfer_engine import Engine, loop
from dinfer_engine.batch import Request
from dinfer_engine.generation_config import GenerationConfig

class Largest(TorchDispatchMode):
    '''The most elements of any fp32 tensor an operation makes.'''
    numel = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                Largest.numel = max(Largest.numel, t.numel())
        return out

directory, prompts, seeds, checked, steps = json.loads(sys.argv[1])
torch.set_num_threads(1)  # a loaded machine's threads wait on each other
engine = Engine.from_pretrained(directory)
config = engine.resolve_config(GenerationConfig(gen_length=256, max_batch_size=len(prompts),
                                                max_denoising_steps=steps))
requests = [Request(i, p, s)
            for i, (p, s) in enumerate(zip(prompts, seeds))]
rows = {}
with Largest():
    loop.run(engine.model, requests, config, engine.stop_ids,
                           lambda row: rows.__setitem__(row.request.index, row.answer))
# this process's own peak: ru_maxrss would start from the parent's (pytest's) peak, which
# Linux carries through the spawn
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:")) * 1024
print(json.dumps({"largest": Largest.numel, "answers": [rows[i] for i in checked],
                  "peak": peak}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    generation = {**GENERATION_CONFIG, "max_denoising_steps": STEPS}
    return write_tiny_diffusion_gemma(tmp_path_factory.mktemp("released-vocab"),
                                      generation=generation, vocab_size=VOCAB,
                                      canvas_length=CANVAS, num_hidden_layers=2,
                                      layer_types=["sliding_attention", "full_attention"])


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> Any:
    from dinfer_engine import Engine
    return Engine.from_pretrained(checkpoint)


def answer(engine: Any, prompt: list[int], seed: int, steps: int = STEPS) -> list[int]:
    from dinfer_engine import loop
    from dinfer_engine.batch import Request
    from dinfer_engine.generation_config import GenerationConfig

    config = engine.resolve_config(GenerationConfig(gen_length=CANVAS, max_batch_size=1,
                                                    max_denoising_steps=steps))
    rows: list[list[int]] = []
    loop.run(engine.model, [Request(0, prompt, seed)], config, engine.stop_ids,
                           lambda row: rows.append(row.answer))
    return rows[0]


def test_rows_per_slice_keeps_the_budget_and_takes_one_canvas_at_least() -> None:
    one = uniform.SLICE_WIDTHS * CANVAS * VOCAB * 4
    assert uniform.rows_per_slice(CANVAS, VOCAB, uniform.STEP_BUDGET) == \
        uniform.STEP_BUDGET // one
    assert uniform.rows_per_slice(CANVAS, VOCAB, 5 * one - 1) == 4
    assert uniform.rows_per_slice(CANVAS, VOCAB, 1) == 1


def test_rows_are_admitted_by_rows_and_by_tokens(engine: Any) -> None:
    from dinfer_engine.batch import Request
    from dinfer_engine.generation_config import GenerationConfig
    from dinfer_engine.row_budget import RowBudget, joiners

    def rows(**fields: int) -> int:
        """How many of 100 free rows a canvas wide join at once (the uniform loop's rule)."""
        waiting = deque(Request(index, [1], None) for index in range(100))
        return len(joiners(waiting, [], CANVAS, lambda _request: CANVAS,
                           engine.resolve_config(GenerationConfig(**fields)),
                           RowBudget(CANVAS, 0)))

    assert rows(max_batch_size=64, max_batch_tokens=65536) == 64
    assert rows(max_batch_size=64, max_batch_tokens=3 * CANVAS + 1) == 3
    assert rows(max_batch_size=64, max_batch_tokens=CANVAS - 1) == 1  # one row always runs
    assert rows(max_batch_size=2, max_batch_tokens=65536) == 2


@pytest.mark.slow
@torch.inference_mode()
def test_batch_1_equals_transformers_generate_at_the_released_vocabulary(
        checkpoint: Path, engine: Any) -> None:
    from transformers import DiffusionGemmaForBlockDiffusion

    reference = DiffusionGemmaForBlockDiffusion.from_pretrained(checkpoint).eval()
    prompt = prompt_for(0)
    torch.manual_seed(0)
    out = reference.generate(torch.tensor([prompt]), max_new_tokens=CANVAS)
    assert answer(engine, prompt, 0) == out.sequences[0, len(prompt):].tolist()


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_batch_of_64_stays_in_bounded_memory_and_its_rows_are_their_batch_1_runs(
        checkpoint: Path, engine: Any) -> None:
    prompts = [prompt_for(seed) for seed in range(ROWS)]
    seeds = list(range(ROWS))
    job = json.dumps([str(checkpoint), prompts, seeds, list(CHECKED), BATCH_STEPS])
    done = subprocess.run([sys.executable, "-c", BATCH, job], capture_output=True,
                          text=True, timeout=1400)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["largest"] <= uniform.rows_per_slice(CANVAS, VOCAB, uniform.STEP_BUDGET) \
        * CANVAS * VOCAB < ROWS * CANVAS * VOCAB
    assert out["peak"] < PEAK_BOUND
    assert out["answers"] == [answer(engine, prompts[r], seeds[r], BATCH_STEPS)
                              for r in CHECKED]


def test_a_step_canvas_by_canvas_gives_the_batchs_tokens(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """With a budget of one byte every slice is one canvas: a mixed batch's rows (rows
    leaving and joining) are still transformers' `generate`, both draw paths."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from dinfer_engine import Engine
    from dinfer_engine.canvas import exponential

    directory = write_tiny_diffusion_gemma(tmp_path, shape="moe")
    engine = Engine.from_pretrained(directory)
    reference = DiffusionGemmaForBlockDiffusion.from_pretrained(directory).eval()
    seeds = list(range(5))
    prompts = [prompt_for(s) for s in seeds]
    expected = [hf_generate(reference, p, s)[0] for p, s in zip(prompts, seeds, strict=True)]
    assert any(EOS_ID in tokens for tokens in expected)  # rows leave at different steps
    monkeypatch.setattr(uniform, "STEP_BUDGET", 1)
    assert [row.answer for row in run_rows(engine, prompts, seeds, 3)] == expected
    monkeypatch.setattr(exponential, "stream", lambda generator: None)
    assert [row.answer for row in run_rows(engine, prompts, seeds)] == expected
