"""The live progress bar of `status --watch` and `submit --wait`."""

import io
import time

from rich.console import Console

from dinfer_batch.cli import watch
from dinfer_batch.cli.watch import follow
from dinfer_batch.storage.tables import Job


def test_the_bar_of_an_ended_job_fits_80_columns():
    job = Job(id=f"batch_{'0' * 32}", status="completed", model="/models/demo",
              total_count=1200, completed_count=1150, failed_count=50,
              completion_tokens=9000, created_at=100.0, in_progress_at=100.0,
              completed_at=130.0)
    screen = io.StringIO()
    assert follow(lambda: job, Console(file=screen, width=80)) is job
    assert "completed" in screen.getvalue()
    assert "1200/1200" in screen.getvalue() and "300.0 tok/s" in screen.getvalue()
    assert "…" not in screen.getvalue()


def test_the_bar_of_a_running_job_shows_its_eta(monkeypatch):
    monkeypatch.setattr(watch, "POLL_SECONDS", 0)
    now = time.time()
    running = Job(id="batch_1", status="in_progress", model="/models/demo", total_count=300,
                  completed_count=100, failed_count=0, completion_tokens=1000,
                  created_at=now - 10, in_progress_at=now - 10)
    ended = Job(id="batch_1", status="completed", model="/models/demo", total_count=300,
                completed_count=300, failed_count=0, completion_tokens=3000,
                created_at=now - 30, in_progress_at=now - 30, completed_at=now)
    states = iter([running, ended])
    screen = io.StringIO()
    watch.follow(lambda: next(states), Console(file=screen, width=80, force_terminal=True))
    assert "100/300" in screen.getvalue() and "ETA 0m2" in screen.getvalue()
