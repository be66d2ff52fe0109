"""The ranks of a tensor-parallel engine as processes: 4 ranks (key/value heads
replicated) still match one rank, dimensions that do not divide fail before any process
starts, a rank killed mid-generation fails the engine instead of hanging it, and helper
ranks end with close() and when their caller dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # before triton compiles any kernel (the kernel path test)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_engine.ranks.failure import RankFailure  # noqa: E402
from tests.engine_requests import asked
from tests.tensor_parallel_models import write_family  # noqa: E402
from tests.tiny_model import write_tiny_checkpoint  # noqa: E402

PROMPTS = ["what is 2+2?", "hello there", "a"]


@pytest.fixture(scope="module")
def llada(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_family(tmp_path_factory.mktemp("tp") / "llada", "llada")


def alive(pid: int) -> bool:
    """Running (an exited process its parent has not reaped yet, a zombie, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int], seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(pid) for pid in pids)


@pytest.mark.slow
def test_four_ranks_match_one(llada: Path):
    one = Engine.from_pretrained(llada)
    with Engine.from_pretrained(llada, tensor_parallel=4) as four:
        assert four.tensor_parallel == 4
        for config, seeds in (
                (GenerationConfig(gen_length=16, block_length=8, cache="dual"), None),
                (GenerationConfig(gen_length=16, block_length=8, decoder="credit"), None),
                (GenerationConfig(gen_length=16, block_length=8, temperature=0.9, top_p=0.9,
                                  logprobs=True), [1, 2, 3])):
            expected = one.generate(asked(PROMPTS, seeds=seeds), config)
            got = four.generate(asked(PROMPTS, seeds=seeds), config)
            assert [r.token_ids for r in got] == [r.token_ids for r in expected]
        helpers = [p.pid for p in four.ranks.processes]
    assert wait_gone(helpers)


def test_dimensions_that_do_not_divide_are_named(tmp_path: Path, llada: Path):
    odd_vocab = write_tiny_checkpoint(tmp_path / "odd")  # 45 tokens
    with pytest.raises(ValueError, match=r"vocabulary size=45 does not divide by "
                                         r"tensor_parallel=2"):
        Engine.from_pretrained(odd_vocab, tensor_parallel=2)
    with pytest.raises(ValueError, match=r"attention heads=4 does not divide by "
                                         r"tensor_parallel=3"):
        Engine.from_pretrained(llada, tensor_parallel=3)
    experts = write_family(tmp_path / "moe", "llada_moe")
    with pytest.raises(ValueError, match=r"num_experts=8 does not divide by "
                                         r"tensor_parallel=3"):
        Engine.from_pretrained(experts, tensor_parallel=3)
    with pytest.raises(ValueError, match="tensor_parallel must be an integer >= 1"):
        Engine.from_pretrained(llada, tensor_parallel=0)


def test_a_killed_rank_fails_the_engine_instead_of_hanging_it(llada: Path):
    engine = Engine.from_pretrained(llada, tensor_parallel=2)
    helper = engine.ranks.processes[0]
    config = GenerationConfig(gen_length=16, block_length=8, max_batch_size=1)
    finished: list[int] = []

    def kill_after_first(index: int, result) -> None:
        finished.append(index)
        if len(finished) == 1:
            helper.send_signal(signal.SIGKILL)
            helper.wait()

    started = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 exited with code -9"):
        engine.generate(PROMPTS, config, on_result=kill_after_first)
    assert time.monotonic() - started < 60  # a closed connection, not the 300 s timeout
    assert finished == [0]
    with pytest.raises(RankFailure, match="stopped"):
        engine.generate(PROMPTS, config)


def test_helpers_end_when_the_caller_dies(llada: Path):
    script = ("import sys, time; from dinfer_engine import Engine; "
              f"e = Engine.from_pretrained({str(llada)!r}, tensor_parallel=2); "
              "print(*[p.pid for p in e.ranks.processes], flush=True); time.sleep(600)")
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    assert caller.stdout is not None
    helpers = [int(pid) for pid in caller.stdout.readline().split()]
    assert helpers and all(alive(pid) for pid in helpers)
    caller.send_signal(signal.SIGKILL)
    caller.wait()
    assert wait_gone(helpers)


def test_helpers_end_when_the_caller_execs_mid_generation(llada: Path):
    """The hang watchdog replaces a worker with os.execv (same pid): helpers waiting in a
    collective see their command pipe close and end."""
    script = ("import os, sys; from dinfer_engine import Engine, GenerationConfig; "
              f"e = Engine.from_pretrained({str(llada)!r}, tensor_parallel=2); "
              "print(*[p.pid for p in e.ranks.processes], flush=True); "
              "again = lambda i, r: os.execv(sys.executable, "
              "[sys.executable, '-c', 'import time; time.sleep(600)']); "
              "e.generate(['a', 'b'], GenerationConfig(gen_length=16, block_length=8, "
              "max_batch_size=1), on_result=again)")
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    assert caller.stdout is not None
    helpers = [int(pid) for pid in caller.stdout.readline().split()]
    try:
        assert helpers and wait_gone(helpers)
        assert caller.poll() is None  # the exec'd program still runs, with the same pid
    finally:
        caller.kill()
        caller.wait()


def test_a_rank_that_cannot_start_fails_at_once(llada: Path, monkeypatch):
    """A helper that dies before it has loaded its shard is a closed pipe for rank 0 (the
    group is joined only after every rank has loaded), not a 300 s wait."""
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the helpers' interpreter
    started = time.monotonic()
    with pytest.raises(RankFailure, match="rank 1 exited with code 1"):
        Engine.from_pretrained(llada, tensor_parallel=2)
    assert time.monotonic() - started < 60


def test_kernel_path_samples_match_one_rank(llada: Path, monkeypatch):
    """Where a one-rank engine samples through the fused LM-head kernel (GPUs; here
    Triton's interpreter), ranks run the kernel's maths with the same counter-based
    noise, reduced across ranks: the same tokens. The kernel choice follows rank 0's
    engine's, even one set after the helpers started."""
    pytest.importorskip("triton")
    one = Engine.from_pretrained(llada, kernels="triton")
    with Engine.from_pretrained(llada, tensor_parallel=2) as two:
        monkeypatch.setattr(two, "kernels", "triton")
        for config, seeds in (
                (GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                                  threshold=0.5), None),
                (GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                                  threshold=0.5, temperature=1.0), [7, 8, 9])):
            expected = one.generate(asked(PROMPTS, seeds=seeds), config)
            got = two.generate(asked(PROMPTS, seeds=seeds), config)
            assert [r.token_ids for r in got] == [r.token_ids for r in expected]
