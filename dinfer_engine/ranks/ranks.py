"""Rank 0's side of a tensor-parallel engine: it starts ranks 1..N-1 as child processes
(`python -m dinfer_engine.ranks.rank`), feeds them commands and stops them.

Each helper gets its setup, then one (name, args) command at a time, pickled on its
stdin, and answers on its stdout. It loads only its own shard, says so, joins the group
(after loading: a helper that fails to load is a closed pipe, not a group waiting for
it), and then runs the same commands as rank 0 (dinfer_engine/ranks/commands.py), in step
through the collectives. A
helper ends on "stop", on end of file (rank 0 closed the pipe, or died: the kernel closes
it), when its parent process is gone (it checks every second), or when a collective
fails; rank 0 learns of a dead helper from a failed collective or a broken pipe, and
raises RankFailure."""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dinfer_engine.parallel.group import DEFAULT_TIMEOUT_S, Group, join, leave
from dinfer_engine.ranks.failure import RankFailure

HOST = "127.0.0.1"
STOP_GRACE_S = 10.0
DEATH_GRACE_S = 5.0  # how long a failed collective waits to see which rank died


@dataclass(frozen=True)
class Setup:
    """What a helper needs to join and load its shard."""

    path: str
    device: str
    dtype: torch.dtype
    rank: int
    size: int
    port: int
    timeout_s: float
    threads: int


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank r's device: the r-th GPU after `device`'s index (cuda = cuda:0), or the CPU."""
    if device.type == "cpu":
        return device
    return torch.device(device.type, (device.index or 0) + rank)


class Ranks:
    """The helper ranks 1..N-1 of one engine, and this process's membership as rank 0."""

    def __init__(self, processes: list[subprocess.Popen], store: dist.TCPStore,
                 device: torch.device, timeout_s: float) -> None:
        self.processes = processes
        self.store, self.device, self.timeout_s = store, device, timeout_s
        self.closed = False

    @classmethod
    def start(cls, path: str, device: torch.device, dtype: torch.dtype, size: int,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> Ranks:
        """Start the helpers; each loads its shard, answers, then joins the group (see
        join()). Loading comes first so that a helper failing to load is a closed pipe
        at once, not a group that waits for it until the timeout."""
        store = dist.TCPStore(HOST, 0, size, is_master=True, wait_for_workers=False)
        processes = []
        for rank in range(1, size):
            process = subprocess.Popen([sys.executable, "-m", "dinfer_engine.ranks.rank"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            setup = Setup(path, str(rank_device(device, rank)), dtype, rank, size, store.port,
                          timeout_s, torch.get_num_threads())
            assert process.stdin is not None
            with contextlib.suppress(OSError):  # gone already: replies() will say so
                pickle.dump(setup, process.stdin)
                process.stdin.flush()
            processes.append(process)
        return cls(processes, store, rank_device(device, 0), timeout_s)

    def join(self) -> Group:
        """Join the group as rank 0; returns once every helper has joined too."""
        return join(0, len(self.processes) + 1, HOST, self.store.port, self.device,
                    self.timeout_s, self.store)

    def send(self, name: str, *args: Any) -> None:
        """Have every helper run command `name`."""
        if self.closed:
            raise RankFailure("the tensor-parallel ranks of this engine were stopped")
        for rank, process in enumerate(self.processes, start=1):
            try:
                assert process.stdin is not None
                pickle.dump((name, args), process.stdin)
                process.stdin.flush()
            except OSError as exc:
                self.close()
                raise RankFailure(f"rank {rank} is gone ({self._state(process)})") from exc

    def replies(self) -> list[Any]:
        """Every helper's answer to the last command, in rank order."""
        answers = []
        for rank, process in enumerate(self.processes, start=1):
            try:
                assert process.stdout is not None
                answers.append(pickle.load(process.stdout))
            except (EOFError, OSError, pickle.UnpicklingError) as exc:
                self.close()
                raise RankFailure(f"rank {rank} stopped answering "
                                  f"({self._state(process)})") from exc
        return answers

    def failed(self, exc: BaseException) -> BaseException:
        """Rank 0 left a command with `exc`: the helpers cannot follow it out of the loop,
        so they are stopped. Returns the exception to raise: RankFailure when a rank died
        or a collective failed, else `exc` itself."""
        dead = self._dead()
        # a peer's closed connection can reach rank 0 before the peer's exit is visible
        deadline = time.monotonic() + DEATH_GRACE_S
        while not dead and isinstance(exc, RuntimeError) and time.monotonic() < deadline:
            time.sleep(0.05)
            dead = self._dead()
        self.close(kill=True)  # they wait in a collective rank 0 will not join
        if dead or isinstance(exc, dist.DistError):
            what = ", ".join(f"rank {r} {self._state(p)}" for r, p in dead) or str(exc)
            return RankFailure(f"tensor-parallel replica lost a rank: {what}")
        return exc

    def close(self, kill: bool = False) -> None:
        """Stop the helpers (asked, then killed after STOP_GRACE_S; or killed at once)
        and leave the group."""
        if self.closed:
            return
        self.closed = True
        for process in self.processes:
            if kill:
                process.kill()
            try:
                assert process.stdin is not None
                pickle.dump(("stop", ()), process.stdin)
                process.stdin.close()
            except OSError:
                pass
        for process in self.processes:
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        leave()

    def _dead(self) -> list[tuple[int, subprocess.Popen]]:
        return [(r, p) for r, p in enumerate(self.processes, start=1) if p.poll() is not None]

    @staticmethod
    def _state(process: subprocess.Popen) -> str:
        code = process.poll()
        return "still running" if code is None else f"exited with code {code}"
