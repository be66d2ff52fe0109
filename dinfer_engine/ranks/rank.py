"""A helper rank of a tensor-parallel engine (`python -m dinfer_engine.ranks.rank`), started
by dinfer_engine/ranks/ranks.py: read the setup, join the group, load this rank's shard,
then run rank 0's commands until told to stop. Any error ends the process (rank 0 then
sees a failed collective or a closed pipe)."""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

import torch

from dinfer_engine.loading.checkpoint import load_model
from dinfer_engine.parallel.group import Group, join, leave
from dinfer_engine.ranks.commands import COMMANDS, parameter_bytes
from dinfer_engine.ranks.ranks import HOST, Setup


class Busy:
    """Which command runs (a count), and whether one does."""

    def __init__(self) -> None:
        self.count = 0
        self.running = False

    def start(self) -> None:
        self.count += 1
        self.running = True


def watch_parent(parent: int, commands: BinaryIO, busy: Busy) -> None:
    """End this process once rank 0 is gone: re-parented (getppid changes), or, while a
    command runs (rank 0 sends nothing until it has the answer), its end of the command
    pipe is closed (rank 0 replaced itself with os.execv, keeping its pid)."""
    def watch() -> None:
        while os.getppid() == parent:
            command = busy.count
            if not busy.running:
                time.sleep(1.0)
            elif (select.select([commands], [], [], 1.0)[0] and busy.running
                  and busy.count == command):
                break  # readable in the middle of the same command: end of file
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="watch-parent").start()


def serve(commands: BinaryIO, replies: BinaryIO, busy: Busy) -> None:
    setup: Setup = pickle.load(commands)
    torch.set_num_threads(setup.threads)
    device = torch.device(setup.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = load_model(Path(setup.path), device, setup.dtype, Group(setup.rank, setup.size))
    answer(replies, parameter_bytes(model))  # loaded
    join(setup.rank, setup.size, HOST, setup.port, device, setup.timeout_s)
    while True:
        try:
            name, args = pickle.load(commands)
        except EOFError:
            break
        if name == "stop":
            break
        busy.start()
        value = COMMANDS[name](model, *args)
        busy.running = False
        answer(replies, value)
    leave()


def answer(replies: BinaryIO, value: Any) -> None:
    pickle.dump(value, replies)
    replies.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is rank 0's to handle
    busy = Busy()
    watch_parent(os.getppid(), sys.stdin.buffer, busy)
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr; stdout carries the answers
    try:
        serve(sys.stdin.buffer, replies, busy)
    except BaseException:  # noqa: BLE001 - whatever it was, this rank is done
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
