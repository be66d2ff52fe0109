"""Show a job's progress: one summary line, or until it ends a live rich progress bar (on a
terminal) or a progress line every few seconds (a log, a pipe)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.fleet.reaper import EMBEDDED_QUEUE
from dinfer_batch.jobs.reading.view import Progress as Figures
from dinfer_batch.jobs.reading.view import progress
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.registry import live_on_queue
from dinfer_batch.storage.tables import Job

POLL_SECONDS = 0.5
LINE_SECONDS = 5.0  # a progress line this often when the output is not a terminal
HINT_SECONDS = 5.0  # how often to check for a live worker on the job's queue


def summary(job: Job) -> str:
    figures = progress(job)
    eta = f", ETA {_duration(figures.eta_s)}" if figures.eta_s is not None else ""
    deduplicated = (f", {job.deduplicated_count} deduplicated" if job.deduplicated_count
                    else "")
    # prompt tokens the workers' prefix caches gave back (its usage's cached_tokens)
    cached = f", {job.cached_tokens:,} cached prompt tokens" if job.cached_tokens else ""
    return (f"{job.id}  {job.status}  {figures.done}/{figures.total} done "
            f"({job.completed_count} completed, {job.failed_count} failed{deduplicated})  "
            f"{figures.tokens_per_s:.1f} tokens/s{eta}{cached}")


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                    transient=False)


def follow(load: Callable[[], Job], console: Console,
           idle_hint: Callable[[Job], str | None] | None = None) -> Job:
    """Poll the job until it ends; returns the ended job. On a terminal a progress bar
    (the status, not the long job id, so that counts and times fit in 80 columns);
    otherwise (a log file, a pipe) one progress line every LINE_SECONDS. `idle_hint`,
    asked every HINT_SECONDS, says why nothing moves (no live worker on the queue); it is
    shown when it changes."""
    job = load()
    hints = _Hints(idle_hint, console)
    if not console.is_terminal:
        printed = 0.0
        while True:
            hints.check(job)
            if job.status in ENDED or time.monotonic() - printed >= LINE_SECONDS:
                console.print(_line(job), highlight=False, soft_wrap=True)
                printed = time.monotonic()
            if job.status in ENDED:
                return job
            time.sleep(POLL_SECONDS)
            job = load()
    with progress_bar(console) as bar:
        task = bar.add_task(job.status, total=job.total_count, rate="")
        while True:
            hints.check(job)
            figures = progress(job)
            bar.update(task, completed=figures.done, description=f"{job.status:<11}",
                       rate=_rate(figures), refresh=True)
            if job.status in ENDED:
                return job
            time.sleep(POLL_SECONDS)
            job = load()


def no_worker_hint(sessions: sessionmaker[Session],
                   worker_timeout: float) -> Callable[[Job], str | None]:
    """What `follow` shows while no live worker takes the job's queue."""

    def hint(job: Job) -> str | None:
        if job.status in ENDED or job.queue == EMBEDDED_QUEUE or \
                live_on_queue(sessions, job.queue, worker_timeout):
            return None
        return no_worker_message(job)

    return hint


def no_worker_message(job: Job) -> str:
    return (f"no live worker takes queue {job.queue!r}; the job waits until one starts: "
            f"dinfer-batch worker --queues {job.queue} --model {job.model}")


class _Hints:
    def __init__(self, ask: Callable[[Job], str | None] | None, console: Console) -> None:
        self.ask, self.console = ask, console
        self.shown: str | None = None
        self.asked = -HINT_SECONDS

    def check(self, job: Job) -> None:
        if self.ask is None or time.monotonic() - self.asked < HINT_SECONDS:
            return
        self.asked = time.monotonic()
        hint = self.ask(job)
        if hint is not None and hint != self.shown:
            self.console.print(f"warning: {hint}", style="yellow", highlight=False,
                               soft_wrap=True)
        self.shown = hint


def _line(job: Job) -> str:
    figures = progress(job)
    return f"{job.id}  {job.status}  {figures.done}/{figures.total}  {_rate(figures)}"


def _rate(figures: Figures) -> str:
    eta = f" ETA {_duration(figures.eta_s)}" if figures.eta_s is not None else ""
    return f"{figures.tokens_per_s:.1f} tok/s{eta}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
