"""The generation loop contract (dinfer_engine/loop.py, ADR 058), asked of every loop:
the masked loop (LLaDA's masks; LLaDA2's block grid) and the uniform-noise loop
(DiffusionGemma). Each is built from its family's entry, holds one canvas per run built
from the family's canvas entry, admits rows from the queue's front within the budgets,
and hands back every row exactly once, its answer at most gen_length long and
independent of the rows beside it."""

from __future__ import annotations

from collections import deque
from functools import partial
from pathlib import Path

import pytest

from dinfer_engine import Engine, GenerationConfig, loop
from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.generation_config import ResolvedConfig
from tests.tensor_parallel_models import write_family
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

LOOPS = ("masked", "block", "uniform")
GEN_LENGTH = 16


@pytest.fixture(scope="module", params=LOOPS)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Engine:
    directory = tmp_path_factory.mktemp(request.param)
    if request.param == "uniform":
        return Engine.from_pretrained(write_tiny_diffusion_gemma(Path(directory)))
    return Engine.from_pretrained(write_family(Path(directory),
                                               "llada" if request.param == "masked"
                                               else "llada2"))


def config(engine: Engine, **fields: object) -> ResolvedConfig:
    """Sampled (a row's draws are its own; uniform noise always samples), blocks of 8."""
    if engine.model.family.canvas != "uniform":
        fields |= {"block_length": 8, "temperature": 0.8}
    return engine.resolve_config(GenerationConfig(gen_length=GEN_LENGTH, early_stop=False,
                                                  **fields))  # type: ignore[arg-type]


def rows(count: int) -> list[Request]:
    """Prompts of different lengths, each with its own seed."""
    return [Request(i, [4 + (i * 7 + j * 3) % 40 for j in range(6 + i % 4)], 10 + i)
            for i in range(count)]


def built(engine: Engine, requests: list[Request], cfg: ResolvedConfig) -> loop.Loop:
    built: loop.Loop = engine.model.family.load_loop()(engine.model, requests, cfg,
                                                         engine.stop_ids, None)
    return built


def test_the_loop_and_its_canvas_come_from_the_family_entry(engine: Engine) -> None:
    family = engine.model.family
    run = built(engine, rows(3), config(engine))
    assert type(run) is family.load_loop()
    assert isinstance(run.canvas, family.canvas_choice.load())  # one object per run
    assert all(run.canvas.row_length(r) >= 1 for r in rows(3))
    assert run.running == 0


def test_admit_takes_the_queue_front_within_max_batch_size(engine: Engine) -> None:
    requests = rows(5)
    run = built(engine, requests, config(engine, max_batch_size=2))
    waiting = deque(requests)
    run.admit(waiting)
    assert run.running == 2
    assert list(waiting) == requests[2:]
    for request in requests[:2]:
        assert request.started > 0  # started, its generator seeded from its seed
        assert request.generator is not None
        assert request.generator.initial_seed() == request.seed


def test_steps_hand_back_every_row_once(engine: Engine) -> None:
    requests = rows(5)
    cfg = config(engine, max_batch_size=2)
    run = built(engine, requests, cfg)
    waiting, finished = deque(requests), list[FinishedRow]()
    while waiting or run.running:
        run.admit(waiting)
        assert 1 <= run.running <= 2
        finished += run.step()
    assert sorted(row.request.index for row in finished) == list(range(5))
    for row in finished:
        assert row.nfe >= 1 and len(row.answer) <= GEN_LENGTH
        # whole, or it ended at a stop token (uniform noise ends at a canvas holding one)
        assert len(row.answer) == GEN_LENGTH or set(row.answer) & set(engine.stop_ids)
        assert row.request is requests[row.request.index]


def keep(answers: dict[int, list[int]], row: FinishedRow) -> None:
    answers[row.request.index] = row.answer


def test_a_rows_answer_does_not_depend_on_its_batch(engine: Engine) -> None:
    answers: dict[int, dict[int, list[int]]] = {}
    for size in (1, 2, 5):  # alone; rows leaving and joining; all together
        got = answers.setdefault(size, {})
        loop.run(engine.model, rows(5), config(engine, max_batch_size=size),
                 engine.stop_ids, partial(keep, got))
    assert answers[1] == answers[2] == answers[5]
    assert len({tuple(answer) for answer in answers[1].values()}) > 1
