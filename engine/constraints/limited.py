"""Running a compilation step in a forked child with a time limit, so that a hostile
schema or pattern costs a worker (or the service checking it at submit) at most that
long: the child is killed when time is up, and a child that dies (out of memory) fails
the constraint instead of the process."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from engine.constraints.spec_errors import ConstraintError


def run_limited(function: Callable[..., Any], args: tuple[Any, ...], seconds: float,
                what: str) -> Any:
    """function(*args) in a forked child; its value, or ConstraintError for a
    ConstraintError it raised, for any other exception (first line of its message), when
    it takes longer than `seconds`, or when it dies."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, function, args), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise ConstraintError(f"compiling the {what} took longer than {seconds:g} s (the "
                                  "limit); simplify it")
        try:
            failed, value = receive.recv()
        except EOFError as exc:
            raise ConstraintError(f"compiling the {what} failed: the compiler ran out of "
                                  "memory or crashed") from exc
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if failed:
        raise ConstraintError(value)
    return value


def _child(send: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        send.send((False, function(*args)))
    except ConstraintError as exc:
        send.send((True, str(exc)))
    except Exception as exc:  # noqa: BLE001 - the library's errors become the line's
        send.send((True, f"the constraint cannot be compiled: {str(exc).splitlines()[0][:500]}"
                   if str(exc) else f"the constraint cannot be compiled: {exc!r}"))
    finally:
        send.close()
