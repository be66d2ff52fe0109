"""One supervisor per node: plans the node's replicas (one worker process per GPU or group
of GPUs, or N CPU replicas), starts each pinned through CUDA_VISIBLE_DEVICES, restarts a
replica that dies (with backoff; a crash loop is reported and left stopped), and forwards
SIGTERM/SIGINT so that every replica stops warm."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field

MAX_RESTARTS = 5  # quick deaths in a row before a replica is left stopped
STABLE_S = 60.0  # a replica up this long is healthy again: its failure count restarts
BACKOFF_MAX_S = 60.0
STOP_GRACE_S = 300.0  # how long stopping replicas may take before they are killed
USAGE_EXIT = 2  # the CLI's exit code for bad input: restarting cannot help


@dataclass(frozen=True)
class Replica:
    name: str
    env: dict[str, str]  # added to the supervisor's environment
    command: list[str]
    devices: list[str] = field(default_factory=list)  # one per tensor-parallel rank


def parse_gpus(spec: str, visible: list[str]) -> list[str]:
    """`0-7`, `0,2,4`, `0-3,6` or `all`, as indices into the GPUs this process sees;
    returns their ids for CUDA_VISIBLE_DEVICES. ValueError on anything else."""
    if spec == "all":
        if not visible:
            raise ValueError("--gpus all: no GPU is visible (nvidia-smi lists none)")
        return list(visible)
    indices: list[int] = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"--gpus {spec!r}: use all, N, N-M or a comma list of them")
        indices += range(int(first), int(last if dash else first) + 1)
    if len(set(indices)) != len(indices) or not indices:
        raise ValueError(f"--gpus {spec!r} names a GPU twice or none")
    if visible and max(indices) >= len(visible):
        raise ValueError(f"--gpus {spec!r}: this machine has {len(visible)} GPU(s)")
    return [visible[i] if visible else str(i) for i in indices]


def visible_gpus() -> list[str]:
    """The GPU ids this process may use, without initialising CUDA: CUDA_VISIBLE_DEVICES
    when set, else what nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()]


def plan(model: str, model_name: str, queues: str, gpus: list[str] | None = None,
         gpus_per_replica: int = 1, replicas: int = 1,
         tensor_parallel: int = 1, log_level: str = "info") -> list[Replica]:
    """The replicas of this node: one per `gpus_per_replica` consecutive GPUs (the model
    tensor-parallel over them), each named `gpu<first>-<model>@<host>`, or (without
    GPUs) `replicas` CPU replicas `cpu<i>-<model>@<host>` of `tensor_parallel` ranks."""
    host = socket.gethostname()
    short = model_name.rstrip("/").rsplit("/", 1)[-1]
    base = [sys.executable, "-m", "dinfer_batch", "worker", "--model", model, "--queues",
            queues, "--log-level", log_level]
    if gpus is None:
        ranks = ["--tensor-parallel", str(tensor_parallel)] if tensor_parallel > 1 else []
        return [Replica(name, {}, [*base, "--device", "cpu", *ranks, "--name", name],
                        ["cpu"] * tensor_parallel)
                for name in (f"cpu{i}-{short}@{host}" for i in range(replicas))]
    if len(gpus) % gpus_per_replica:
        raise ValueError(f"{len(gpus)} GPU(s) do not split into replicas of "
                         f"{gpus_per_replica}")
    planned = []
    for start in range(0, len(gpus), gpus_per_replica):
        group = gpus[start:start + gpus_per_replica]
        name = f"gpu{group[0]}-{short}@{host}"
        ranks = ["--tensor-parallel", str(len(group))] if len(group) > 1 else []
        planned.append(Replica(name, {"CUDA_VISIBLE_DEVICES": ",".join(group)},
                               [*base, "--device", "cuda", *ranks, "--name", name],
                               [f"cuda:{gpu}" for gpu in group]))
    return planned


def _die_with_parent() -> None:
    """In the child: get SIGTERM (a warm stop) if the supervisor dies (Linux)."""
    with suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class _Slot:
    replica: Replica
    process: subprocess.Popen | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    given_up: bool = False


@dataclass
class Supervisor:
    replicas: list[Replica]
    stopping: bool = False
    slots: list[_Slot] = field(default_factory=list)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (then 0), or until every replica has given up (1)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(self, "stopping", True))
        self.slots = [_Slot(replica) for replica in self.replicas]
        for slot in self.slots:
            self._start(slot)
        while not self.stopping:
            now = time.monotonic()
            for slot in self.slots:
                if slot.process is not None and slot.process.poll() is not None:
                    self._died(slot, now)
                if slot.restart_at is not None and now >= slot.restart_at:
                    self._start(slot)
            if all(slot.given_up for slot in self.slots):
                _say("every replica failed; stopping")
                return 1
            time.sleep(0.2)
        self._stop_all()
        return 0

    def _start(self, slot: _Slot) -> None:
        slot.process = subprocess.Popen(slot.replica.command,
                                        env=os.environ | slot.replica.env,
                                        start_new_session=True, preexec_fn=_die_with_parent)
        slot.started, slot.restart_at = time.monotonic(), None
        _say(f"started {slot.replica.name} (pid {slot.process.pid})")

    def _died(self, slot: _Slot, now: float) -> None:
        assert slot.process is not None
        code, uptime = slot.process.returncode, now - slot.started
        slot.process = None
        slot.failures = 1 if uptime >= STABLE_S else slot.failures + 1
        if code == USAGE_EXIT or slot.failures > MAX_RESTARTS:
            slot.given_up = True
            why = "bad usage" if code == USAGE_EXIT else (
                f"crash loop: {slot.failures} deaths within {STABLE_S:.0f} s of starting")
            _say(f"{slot.replica.name} exited with code {code}; not restarting it ({why})")
            return
        delay = min(BACKOFF_MAX_S, 2.0 ** (slot.failures - 1))
        slot.restart_at = now + delay
        _say(f"{slot.replica.name} exited with code {code} after {uptime:.1f} s; "
             f"restarting in {delay:.0f} s")

    def _stop_all(self) -> None:
        """Forward SIGTERM (a warm stop: each replica gives its chunk back) and wait."""
        running = [s.process for s in self.slots if s.process and s.process.poll() is None]
        _say(f"stopping {len(running)} replica(s)")
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _say(message: str) -> None:
    print(f"supervisor: {message}", file=sys.stderr, flush=True)
