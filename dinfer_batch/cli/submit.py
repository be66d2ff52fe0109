"""`dinfer-batch submit`: validate a JSONL file into a job and queue its chunks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from dinfer_batch.cli.broker import open_broker
from dinfer_batch.cli.options import input_options, job_options, job_spec, setting
from dinfer_batch.cli.watch import follow, no_worker_hint, no_worker_message
from dinfer_batch.config import Settings
from dinfer_batch.errors import JobFailed
from dinfer_batch.jobs.create import create_job, input_columns, job_input
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.reading.view import job_object
from dinfer_batch.parallel import cpus
from dinfer_batch.statuses import JobStatus
from dinfer_batch.storage import db
from dinfer_batch.storage.registry import live_on_queue


@click.command()
@input_options
@job_options
@click.option("--queue", default=setting("default_queue"), show_default="dinfer_batch",
              help="Celery queue (workers listen with --queues).")
@click.option("--wait", is_flag=True, help="Show progress until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the job object as JSON.")
@click.pass_obj
def submit(config: Settings, file: Path | None, template: str | None,
           vars_file: Path | None, messages: bool, queue: str, wait: bool, as_json: bool,
           **options: Any) -> None:
    """Queue FILE (JSONL, one request per line; or Parquet, one per row), or a --template
    rendered with each line of --vars, for the workers; print the job id.

    Lines that are not valid requests become failed items with their line number; a
    missing or empty file, a duplicate custom_id or an unknown model is refused before
    anything is queued. Generation options left unset take the model's
    generation_config.json values; a line's own fields (max_tokens, decoder, ...) override
    both. Examples:

    \b
        dinfer-batch submit prompts.jsonl --max-tokens 64 --metadata run=nightly
        dinfer-batch submit --template 'Poem on {topic}:' --vars topics.jsonl --n 4
    """
    path, parsed_template = job_input(file, template, vars_file, messages,
                                      input_columns(options))
    sessions = db.ready_for(config)
    # processes check lines while this one writes them: 3 outpace one SQLite writer
    job = create_job(sessions, open_broker(config), path,
                     job_spec(options, queue, config.model_dir), config, parsed_template,
                     processes=min(cpus() - 1, 3))
    timeout = config.worker_timeout
    if job.chunk_count and not wait and not live_on_queue(sessions, job.queue, timeout):
        click.secho(f"warning: {no_worker_message(job)}", fg="yellow", err=True)
    click.echo(json.dumps(job_object(job), indent=2) if as_json else job.id)
    if wait:  # follow gives the same warning, and again whenever it stops being true
        job = follow(lambda: get_job(sessions, job.id), Console(stderr=True),
                     no_worker_hint(sessions, config.worker_timeout))
        if job.status != JobStatus.COMPLETED:
            raise JobFailed(f"{job.id} ended {job.status}: {job.error or ''}".rstrip(": "))
