"""`dinfer-batch run`: the embedded default. The same ingest and chunk code as the
service, in this process: no Redis, no worker, SQLite unless told otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from dinfer_batch.cli.jobs import results
from dinfer_batch.cli.options import input_options, job_options, job_spec, result_options
from dinfer_batch.cli.watch import progress_bar, summary
from dinfer_batch.config import Settings
from dinfer_batch.device import check_device
from dinfer_batch.errors import JobFailed
from dinfer_batch.jobs.create import input_columns, job_input
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.lifecycle import cancel_job, fail_job
from dinfer_batch.jobs.reading.view import notes
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.jobs.running.chunk_state import ChunkMetrics
from dinfer_batch.jobs.running.engine_options import configure_engines
from dinfer_batch.jobs.running.runner import ChunkRunner
from dinfer_batch.statuses import ChunkStatus, JobStatus
from dinfer_batch.storage import db
from dinfer_workers.engine_cache import rank_devices


@click.command()
@input_options
@result_options
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--tensor-parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Split the model over this many ranks (processes): CPU (gloo), or "
                   "--device's GPU and the next ones.")
@job_options
@click.pass_context
def run(ctx: click.Context, file: Path | None, template: str | None, vars_file: Path | None,
        messages: bool, output: Path | None, errors: Path | None, per_sample: bool,
        format_: str, device: str, tensor_parallel: int, **options: Any) -> None:
    """Run FILE (or --template with --vars) to completion in this process and write the
    results (no Redis needed).

    Uses the bundled demo model unless --model says otherwise, and the same database as
    the service (DINFER_BATCH_DATABASE_URL, else SQLite), so `status`, `list` and
    `results` work on the job afterwards. Ctrl-C cancels the job. Generation options
    left unset take the model's generation_config.json values; a line's own fields
    (max_tokens, decoder, ...) override both. Example:

        dinfer-batch run prompts.jsonl -o results.jsonl
    """
    config: Settings = ctx.obj
    path, parsed_template = job_input(file, template, vars_file, messages,
                                      input_columns(options))
    for rank_device in rank_devices(device, tensor_parallel):
        check_device(rank_device)
    engines = configure_engines(tensor_parallel, config)
    batch_items = config.engine_batch_items
    sessions = db.ready_for(config)
    job = ingest(sessions, path, job_spec(options, "embedded", config.model_dir), config,
                 parsed_template)
    console = Console(stderr=True)
    with progress_bar(console) as bar:
        task = bar.add_task(f"{job.id} ({Path(job.model).name})", total=job.total_count,
                            completed=job.failed_count, rate="")
        runner = ChunkRunner(sessions, device=device, worker="embedded",
                             batch_items=batch_items, config=config, engines=engines,
                             on_written=lambda n: bar.advance(task, n))
        try:
            for chunk_id in range(job.chunk_count):
                runner(job.id, chunk_id)
        except KeyboardInterrupt:
            cancel_job(sessions, job.id)
            chunk_state.finish(sessions, job.id, chunk_id, ChunkStatus.CANCELLED, ChunkMetrics())
            raise
        except Exception as exc:
            fail_job(sessions, job.id, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            runner.writes.shutdown()  # what its writer thread has left (the job's end)
    job = get_job(sessions, job.id)
    ctx.invoke(results, job_id=job.id, output=output, errors=errors, per_sample=per_sample,
               format_=format_)
    click.echo("\n".join([summary(job) + (f" -> {output}" if output else ""), *notes(job)]),
               err=True)
    if job.status != JobStatus.COMPLETED:
        raise JobFailed(f"{job.id} ended {job.status}" + (f": {job.error}" if job.error else ""))


