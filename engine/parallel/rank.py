"""A helper rank of a tensor-parallel engine (`python -m engine.parallel.rank`), started
by engine/parallel/ranks.py: read the setup, join the group, load this rank's shard,
then run rank 0's commands until told to stop. Any error ends the process (rank 0 then
sees a failed collective or a closed pipe)."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import torch

from engine.loading.checkpoint import load_model
from engine.parallel.commands import COMMANDS, parameter_bytes
from engine.parallel.group import join, leave
from engine.parallel.ranks import HOST, Setup


def watch_parent(parent: int) -> None:
    """End this process once its parent is gone (re-parented: getppid changes)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="watch-parent").start()


def serve(commands: BinaryIO, replies: BinaryIO) -> None:
    setup: Setup = pickle.load(commands)
    torch.set_num_threads(setup.threads)
    device = torch.device(setup.device)
    group = join(setup.rank, setup.size, HOST, setup.port, device, setup.timeout_s)
    model = load_model(Path(setup.path), device, setup.dtype, group)
    answer(replies, parameter_bytes(model))  # ready
    while True:
        try:
            name, args = pickle.load(commands)
        except EOFError:
            break
        if name == "stop":
            break
        answer(replies, COMMANDS[name](model, *args))
    leave()


def answer(replies: BinaryIO, value: Any) -> None:
    pickle.dump(value, replies)
    replies.flush()


def main() -> None:
    watch_parent(os.getppid())
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr; stdout carries the answers
    try:
        serve(sys.stdin.buffer, replies)
    except BaseException:  # noqa: BLE001 - whatever it was, this rank is done
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
