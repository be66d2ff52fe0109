"""Running a compilation step in a child process with a time and a memory limit, so that
a hostile schema or pattern costs a worker (or the service checking it at submit) at
most that long and that much: the child is killed when time is up, its address space
may grow by at most `memory_bytes` (RLIMIT_AS), and a child that dies fails the
constraint instead of the process.

`start="fork"` copies this process (the child reads its arguments without pickling: a
vocabulary); `"forkserver"` forks a small server process started once, so that a large,
multi-threaded process (the API server) is never forked: forking holds the GIL while the
page tables are copied, which stalls every other request."""

from __future__ import annotations

import multiprocessing
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from engine.constraints.spec_errors import ConstraintError

PAGE_BYTES = resource.getpagesize()
MB = 2**20
COMPILE_SECONDS = 120.0  # wall clock: a JSON schema over 126,464 tokens takes ~4 CPU-s


@dataclass(frozen=True)
class CompileLimits:
    """What compiling one constraint over a vocabulary may take (wall-clock seconds;
    bytes its child may grow by), and what an engine's compiled automata may hold
    (estimated bytes: engine/constraints/compiled.py)."""

    seconds: float = COMPILE_SECONDS
    memory_bytes: int = 2048 * MB
    cache_bytes: int = 1024 * MB


def run_limited(function: Callable[..., Any], args: tuple[Any, ...], seconds: float,
                what: str, memory_bytes: int | None = None,
                start: Literal["fork", "forkserver"] = "fork") -> Any:
    """function(*args) in a child; its value, or ConstraintError for a ConstraintError it
    raised, for any other exception (first line of its message), when it takes longer
    than `seconds`, needs more than `memory_bytes` beyond what it started with, or
    dies."""
    if start == "forkserver":
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload([function.__module__])  # imported once, in the server
    context = server if start == "forkserver" else multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, function, args, memory_bytes),
                            daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise ConstraintError(f"compiling the {what} took longer than {seconds:g} s (the "
                                  "limit); simplify it")
        try:
            failed, value = receive.recv()
        except EOFError as exc:
            raise ConstraintError(f"compiling the {what} failed: the compiler crashed"
                                  + _memory_note(memory_bytes)) from exc
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if failed:
        raise ConstraintError(value)
    return value


def memory_limit_text(memory_bytes: int) -> str:
    return f"the memory limit of {memory_bytes / MB:,.0f} MB per compile"


def _memory_note(memory_bytes: int | None) -> str:
    """Rust aborts where Python would raise MemoryError: a dead child had most likely
    reached its memory limit."""
    return "" if memory_bytes is None else \
        f" or needed more than {memory_limit_text(memory_bytes)}; simplify the constraint"


def _limit_memory(memory_bytes: int) -> None:
    """Let this process's address space grow by `memory_bytes` from its current size."""
    if sys.platform != "linux":  # RLIMIT_AS is not enforced everywhere: time limit only
        return
    with open("/proc/self/statm") as statm:
        current = int(statm.read().split()[0]) * PAGE_BYTES
    limit = current + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child(send: Any, function: Callable[..., Any], args: tuple[Any, ...],
           memory_bytes: int | None) -> None:
    try:
        if memory_bytes is not None:
            _limit_memory(memory_bytes)
        send.send((False, function(*args)))
    except ConstraintError as exc:
        send.send((True, str(exc)))
    except MemoryError:
        send.send((True, "compiling the constraint ran out of memory" if memory_bytes is None
                   else f"compiling the constraint needed more than "
                        f"{memory_limit_text(memory_bytes)}; simplify it"))
    except Exception as exc:  # noqa: BLE001 - the library's errors become the line's
        send.send((True, f"the constraint cannot be compiled: {str(exc).splitlines()[0][:500]}"
                   if str(exc) else f"the constraint cannot be compiled: {exc!r}"))
    finally:
        send.close()
