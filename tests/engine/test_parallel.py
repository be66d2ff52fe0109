"""ordered_map: results in order, computed in forked processes, with what pickle refuses."""

import os
import subprocess
import sys
import threading
from contextlib import closing

import pytest

from dinfer_batch.parallel import forkable, ordered_map


def test_ordered_map_keeps_order_and_runs_in_other_processes():
    offset = 1000
    unpicklable = lambda n: n + offset  # noqa: E731 - travels to the children by fork
    results = list(ordered_map(lambda n: (unpicklable(n), os.getpid()), range(40), 2))
    assert [value for value, _ in results] == list(range(1000, 1040))
    pids = {pid for _, pid in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def test_ordered_map_in_this_process_and_errors_reach_the_caller():
    assert list(ordered_map(str, [1, 2], 0)) == ["1", "2"]

    def fails_on_three(n):
        if n == 3:
            raise ValueError("three")
        return n

    with pytest.raises(ValueError, match="three"):
        list(ordered_map(fails_on_three, range(10), 2))


def test_closing_the_iterator_early_ends_its_processes():
    before = threading.active_count()
    with closing(ordered_map(abs, range(-50, 50), 2)) as results:
        assert next(results) == 50
        assert threading.active_count() > before  # the pool's own threads
    assert threading.active_count() == before


def test_no_fork_while_another_thread_runs():
    alone = subprocess.run([sys.executable, "-c", "from dinfer_batch.parallel import forkable; "
                            "print(forkable(3))"], capture_output=True, text=True, check=True)
    assert alone.stdout.strip() == "3"
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert forkable(3) == 0
    finally:
        release.set()
        other.join()
