"""Show a job's progress: one summary line, or a live rich progress bar until it ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dinfer_batch.jobs.lifecycle import ENDED
from dinfer_batch.jobs.view import Progress as Figures
from dinfer_batch.jobs.view import progress
from dinfer_batch.storage.tables import Job

POLL_SECONDS = 0.5


def summary(job: Job) -> str:
    figures = progress(job)
    eta = f", ETA {_duration(figures.eta_s)}" if figures.eta_s is not None else ""
    deduplicated = (f", {job.deduplicated_count} deduplicated" if job.deduplicated_count
                    else "")
    return (f"{job.id}  {job.status}  {figures.done}/{figures.total} done "
            f"({job.completed_count} completed, {job.failed_count} failed{deduplicated})  "
            f"{figures.tokens_per_s:.1f} tokens/s{eta}")


def progress_bar(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                    transient=False)


def follow(load: Callable[[], Job], console: Console) -> Job:
    """Poll the job until it ends, drawing a progress bar; returns the ended job. The bar
    shows the status, not the long job id, so that counts and times fit in 80 columns."""
    job = load()
    with progress_bar(console) as bar:
        task = bar.add_task(job.status, total=job.total_count, rate="")
        while True:
            figures = progress(job)
            bar.update(task, completed=figures.done, description=f"{job.status:<11}",
                       rate=_rate(figures), refresh=True)
            if job.status in ENDED:
                return job
            time.sleep(POLL_SECONDS)
            job = load()


def _rate(figures: Figures) -> str:
    eta = f" ETA {_duration(figures.eta_s)}" if figures.eta_s is not None else ""
    return f"{figures.tokens_per_s:.1f} tok/s{eta}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
