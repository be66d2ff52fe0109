"""The live progress bar of `status --watch` and `submit --wait`."""

import io
import time

from rich.console import Console

from dinfer_batch.cli import watch
from dinfer_batch.cli.watch import follow, no_worker_hint
from dinfer_batch.storage import db, registry
from dinfer_batch.storage.registry import WorkerState
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


def _jobs(queue="q1"):
    now = time.time()
    running = Job(id="batch_1", status="in_progress", model="demo", queue=queue,
                  total_count=300, completed_count=0, failed_count=0, completion_tokens=0,
                  created_at=now - 10, in_progress_at=now - 10)
    ended = Job(id="batch_1", status="completed", model="demo", queue=queue, total_count=300,
                completed_count=300, failed_count=0, completion_tokens=3000,
                created_at=now - 30, in_progress_at=now - 30, completed_at=now)
    return running, ended


def test_without_a_terminal_a_line_every_few_seconds_and_the_missing_worker_named(
        monkeypatch, sqlite_url):
    monkeypatch.setattr(watch, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(watch, "LINE_SECONDS", 0.05)
    running, ended = _jobs()
    states = iter([running] * 30 + [ended])
    screen = io.StringIO()
    sessions = db.ready(sqlite_url)
    job = follow(lambda: next(states), Console(file=screen, width=80), no_worker_hint(sessions, 60))
    assert job is ended
    lines = screen.getvalue().splitlines()
    assert lines[0] == ("warning: no live worker takes queue 'q1'; the job waits until one "
                        "starts: dinfer-batch worker --queues q1 --model demo")
    progress_lines = [line for line in lines[1:] if line.startswith("batch_1  in_progress  0/300")]
    assert 2 <= len(progress_lines) < 30  # every LINE_SECONDS, not every poll
    assert lines[-1].startswith("batch_1  completed  300/300")
    assert sum("warning" in line for line in lines) == 1  # said once while it stays true


def test_no_hint_while_a_live_worker_takes_the_queue(sqlite_url):
    sessions = db.ready(sqlite_url)
    registry.register(sessions, "w/1", "w", "demo", "cpu", ["other", "q1"])
    registry.write_heartbeat(sessions, "w/1", WorkerState())
    running, _ = _jobs()
    assert no_worker_hint(sessions, 60)(running) is None
    assert "--queues q2" in no_worker_hint(sessions, 60)(_jobs("q2")[0])
