"""Commands on existing jobs: status, results, list, cancel, retry."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.cli.broker import open_broker
from dinfer_batch.cli.options import result_options
from dinfer_batch.cli.resume import Target, write_resumable
from dinfer_batch.cli.watch import follow, no_worker_hint, summary
from dinfer_batch.config import Settings
from dinfer_batch.errors import CannotWrite, JobFailed, UserError
from dinfer_batch.gc_pause import no_cycle_collection
from dinfer_batch.jobs import queueing
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.lifecycle import list_jobs
from dinfer_batch.jobs.reading.parquet_output import write_parquet
from dinfer_batch.jobs.reading.place import place
from dinfer_batch.jobs.reading.results import output_texts
from dinfer_batch.jobs.reading.view import job_object, notes
from dinfer_batch.jobs.retention import result_gone
from dinfer_batch.jobs.spec import priority_name
from dinfer_batch.parallel import cpus
from dinfer_batch.statuses import ENDED, STATUSES, JobStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.registry import live_on_job
from dinfer_batch.storage.tables import Job


@click.command()
@click.argument("job_id", metavar="JOB")
@click.option("--watch", is_flag=True,
              help="Live progress until the job ends: a bar on a terminal, else a line every "
                   "few seconds; says when no live worker takes the job's queue.")
@click.option("--json", "as_json", is_flag=True, help="Print the job object as JSON.")
@click.pass_obj
def status(config: Settings, job_id: str, watch: bool, as_json: bool) -> None:
    """Show JOB's counts, tokens/s and ETA, its priority and its place in the queue
    (chunks dispatched before its next one, or running). Exit code 1 if it ended failed
    or cancelled.

    Example, a live progress bar until the job ends:

        dinfer-batch status JOB --watch
    """
    sessions = db.ready_for(config)
    job = get_job(sessions, job_id)
    if watch:
        job = follow(lambda: get_job(sessions, job_id), Console(stderr=True),
                     no_worker_hint(sessions, config.worker_timeout))
    on_job = 0 if job.status in ENDED else live_on_job(sessions, job_id, config.worker_timeout)
    where = place(sessions, job)
    click.echo(json.dumps(job_object(job, where) | {"workers": on_job}, indent=2) if as_json
               else "\n".join([f"{summary(job)}{_place_text(job, where)}  {on_job} worker(s) "
                               "on it", *notes(job)]))
    if job.status in ENDED and job.status != JobStatus.COMPLETED:
        raise JobFailed(f"{job.id} ended {job.status}" + (f": {job.error}" if job.error else ""))


def _place_text(job: Job, where: int | str | None) -> str:
    if where is None:
        return ""
    ahead = "running" if where == "running" else f"{where} chunk(s) ahead in the queue"
    return f"  priority {priority_name(job.priority)}, {ahead}"


@click.command()
@click.argument("job_id", metavar="JOB")
@result_options
@click.pass_obj
def results(config: Settings, job_id: str, output: Path | None, errors: Path | None,
            per_sample: bool = False, format_: str = "jsonl") -> None:
    """Write JOB's results as OpenAI BatchRequestOutput JSONL lines, in input order.

    Each line: {"id", "custom_id", "response": {"status_code", "request_id", "body"},
    "error"}; the body carries usage and the engine's metrics (nfe, tokens per forward,
    latency, seeds). A request with n samples has n choices; --per-sample splits it.
    Failed lines have "response": null and "error": {"code", "message"}. With -o, the
    file is written under a hidden partial name and renamed when whole; a run that stops
    leaves the partial, and the same command resumes it from where it stopped (not with
    --per-sample). Example:

        dinfer-batch results JOB -o results.jsonl --errors errors.jsonl
    """
    sessions = db.ready_for(config)
    job = get_job(sessions, job_id)
    if job.status not in ENDED:
        raise UserError(f"job {job_id} is still {job.status} ({summary(job)}); "
                        f"follow it with `dinfer-batch status {job_id} --watch`")
    if result_gone(job):
        raise UserError(f"job {job_id}'s requests and results were deleted "
                        "(`delete`, output_expires_after or DINFER_BATCH_RETENTION_DAYS)")
    if format_ == "parquet":
        if output is None or errors is not None:
            raise UserError("--format parquet writes one file, named by -o (failed requests "
                            "are rows with status failed; --errors is for JSONL)")
        with written_whole(output, binary=True) as handle:
            write_parquet(sessions, job, handle, per_sample)
        return
    # processes read and format pages while this one writes them: up to 4 (memory: 2 pages
    # each in flight), all CPUs as writing takes little of this one's time
    processes = min(cpus(), 4)
    if output is not None and not per_sample:  # resumable (cli/resume.py)
        targets = ([Target(output, "all")] if errors is None
                   else [Target(output, "output"), Target(errors, "errors")])
        with no_cycle_collection():
            write_resumable(config.database_url, job, targets, processes)
        return
    with _open(output) as out, _open(errors) as err, no_cycle_collection():
        pages = output_texts(config.database_url, job, per_sample, bool(errors), processes)
        with closing(pages):  # a failed write stops it early: its processes end here
            for good, failed in pages:
                out.write(good)
                if failed:
                    err.write(failed)


@contextmanager
def _open(path: Path | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        return
    with written_whole(path) as handle:
        yield handle


@contextmanager
def written_whole(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """Write to a hidden temporary name beside `path` and rename it only once everything is
    on disk, so that `path` is either the whole output or untouched. A write that fails
    (read-only directory, disk full) removes the temporary file and raises CannotWrite."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with (partial.open("wb") if binary else partial.open("w", encoding="utf-8")) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        with suppress(OSError):
            partial.unlink(missing_ok=True)


@click.command("list")
@click.option("--status", "status_", type=click.Choice(STATUSES), help="Only jobs in it.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many jobs to show.")
@click.option("--json", "as_json", is_flag=True, help="One job object per line.")
@click.pass_obj
def list_(config: Settings, status_: str | None, limit: int, as_json: bool) -> None:
    """List the most recent jobs, newest first.

    Example, the jobs still running:

        dinfer-batch list --status in_progress
    """
    jobs = list_jobs(db.ready_for(config), status_, limit)
    if as_json:
        for job in jobs:
            click.echo(json.dumps(job_object(job)))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")  # fits 80 columns with long ids
    table.add_column("id", no_wrap=True)
    table.add_column("status", no_wrap=True, min_width=len("in_progress"))
    for name in ("done", "failed", "total"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("model", overflow="fold")
    for job in jobs:
        table.add_row(job.id, job.status, str(job.completed_count + job.failed_count),
                      str(job.failed_count), str(job.total_count), Path(job.model).name)
    Console().print(table)


@click.command()
@click.argument("job_id", metavar="JOB")
@click.pass_obj
def cancel(config: Settings, job_id: str) -> None:
    """Cancel JOB: queued chunks are dropped, running ones stop at their next engine batch.
    Finished results stay available through `results`."""
    click.echo(f"{job_id} {queueing.cancel(db.ready_for(config), job_id).status}")


@click.command()
@click.argument("job_id", metavar="JOB")
@click.pass_obj
def retry(config: Settings, job_id: str) -> None:
    """Re-queue JOB's failed and unfinished requests (invalid input lines stay failed)."""
    chunks = queueing.retry(db.ready_for(config), open_broker(config), job_id,
                            config)
    click.echo(f"{job_id} re-queued {chunks} chunk(s)")
