"""`dinfer-batch schedule ...` (recurring jobs stored in SQL) and `dinfer-batch beat` (the
process that makes their runs)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.cli.broker import open_broker
from dinfer_batch.cli.options import input_options, job_options, job_spec, setting
from dinfer_batch.config import Settings
from dinfer_batch.errors import JobFailed, UserError
from dinfer_batch.formats.lines.columns import LineParser
from dinfer_batch.formats.lines.template import Template
from dinfer_batch.jobs.create import broker_unreachable, input_columns, job_input
from dinfer_batch.schedules.beat import manual_run, run_beat
from dinfer_batch.schedules.store import (
    Trigger,
    add_schedule,
    get_schedule,
    iso,
    list_schedules,
    remove_schedule,
    runs_of,
    schedule_object,
    set_paused,
)
from dinfer_batch.storage import db


@click.group()
def schedule() -> None:
    """Recurring jobs: a file, or a template and its vars, made into a job at fixed times.

    Runs are made by `dinfer-batch beat` (start one; a second one by mistake is
    harmless). Each run is an ordinary job (metadata schedule=NAME, run=<due time, UTC>)
    that `status`, `results` and `list` show. Example, 4 samples of every prompt each
    night at 02:00:

    \b
      dinfer-batch schedule add nightly --cron '0 2 * * *' \\
          --template examples/synth_template.txt --vars examples/synth_vars.jsonl \\
          --n 4 --temperature 0.8
      dinfer-batch beat
    """


@schedule.command("add")
@click.argument("name")
@click.option("--cron", help="'m h dom mon dow' in this machine's local time, e.g. '0 2 * * *'.")
@click.option("--every", help="Interval: 30s, 10m, 1h, 1d (first run one interval from now).")
@input_options
@job_options
@click.option("--queue", default=setting("default_queue"), show_default="dinfer_batch",
              help="Celery queue (workers listen with --queues).")
@click.option("--same-seeds", is_flag=True,
              help="Every run uses --seed-base (same data each run); by default each run "
                   "gets a new seed base, stored on its job.")
@click.option("--overlap", is_flag=True,
              help="Start a run even while the previous run's job is still going "
                   "(by default that run is skipped).")
@click.pass_obj
def add(config: Settings, name: str, cron: str | None, every: str | None, file: Path | None,
        template: str | None, vars_file: Path | None, messages: bool, queue: str,
        same_seeds: bool, overlap: bool, **options: Any) -> None:
    """Add schedule NAME: make a job from FILE (or --template and --vars) at each time of
    --cron EXPR or --every DURATION, with the job options given here. The input is read
    at each run (a missing file skips that run). Example:

        dinfer-batch schedule add nightly --cron '0 2 * * *' prompts.jsonl --n 4
    """
    trigger = Trigger.parse(cron, every, config.min_every)
    columns = input_columns(options)
    path, parsed_template = job_input(file, template, vars_file, messages, columns)
    spec = job_spec(options, queue, config.model_dir)
    source = _stored_input(path, template, parsed_template, messages)
    if columns is not None:
        source["columns"] = {"text": columns.text, "messages": columns.messages,
                             "custom_id": columns.custom_id}
    stored = {"input": source, "queue": queue,
              "options": options | {"model": spec.model.path,
                                    "metadata": list(options["metadata"])}}
    db_sessions = db.ready_for(config)
    added = add_schedule(db_sessions, name, trigger, stored, options["seed_base"], same_seeds,
                         overlap)
    click.echo(f"{name}: {trigger.kind} {trigger.expr}, next run {iso(added.next_run_at)}")
    for needed in (source.get("file"), source.get("vars")):
        if needed and not Path(needed).is_file():
            click.secho(f"warning: {needed} does not exist yet; runs are skipped until it "
                        "does", fg="yellow", err=True)


def _stored_input(path: Path, template: str | None, parsed: LineParser | None,
                  messages: bool) -> dict[str, Any]:
    """What a run reads: the file, or the template (its file, so that edits are picked up,
    or its text) and the vars file; absolute paths, as beat may run elsewhere."""
    if not isinstance(parsed, Template):
        return {"file": str(path.resolve())}
    template_path = Path(template or "").expanduser()
    source = ({"template_file": str(template_path.resolve())} if template_path.is_file()
              else {"template": parsed.text})
    return source | {"vars": str(path.resolve()), "messages": messages}


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="One schedule object per line.")
@click.pass_obj
def list_(config: Settings, as_json: bool) -> None:
    """List schedules: trigger, next run, last run and its job's status, paused."""
    sessions = db.ready_for(config)
    objects = [schedule_object(s, runs_of(sessions, s.name, limit=1))
               for s in list_schedules(sessions)]
    if as_json:
        for obj in objects:
            click.echo(json.dumps({k: v for k, v in obj.items() if k != "runs"}))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("name", "trigger", "next run (UTC)", "last run (UTC)", "paused"):
        table.add_column(column, overflow="fold")
    for obj in objects:
        last = obj["last_run"]
        last_text = "-" if last is None else (f"{_short(last['due'])} "
                                              f"{last['job_status'] or last['status']}")
        table.add_row(obj["name"], obj["trigger"], _short(obj["next_run"]), last_text,
                      "yes" if obj["paused"] else "no")
    Console().print(table)


def _short(iso_time: str | None) -> str:
    """`2026-12-01T02:00:00+00:00` as `2026-12-01 02:00`, to fit 80 columns."""
    return "-" if iso_time is None else iso_time[:16].replace("T", " ")


@schedule.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of its latest runs to show.")
@click.pass_obj
def show(config: Settings, name: str, as_json: bool, runs: int) -> None:
    """Show schedule NAME with its latest runs (job id and status, or why it was skipped)."""
    sessions = db.ready_for(config)
    obj = schedule_object(get_schedule(sessions, name), runs_of(sessions, name, limit=runs))
    if as_json:
        click.echo(json.dumps(obj, indent=2))
        return
    click.echo(f"{obj['name']}: {obj['trigger']}{' (paused)' if obj['paused'] else ''}, "
               f"next run {obj['next_run']}")
    click.echo(f"input: {json.dumps(obj['input'])}")
    click.echo(f"model: {obj['model']}; seeds: "
               + (f"--seed-base {obj['seed_base']} every run" if obj["same_seeds"]
                  else "a new seed base each run"))
    for run in obj["runs"]:
        what = (f"{run['job_id']} {run['job_status']}" if run["job_id"]
                else f"{run['status']}: {run['reason']}")
        click.echo(f"  {run['due']}  {what}")


@schedule.command()
@click.argument("name")
@click.pass_obj
def pause(config: Settings, name: str) -> None:
    """Stop making runs of NAME until `resume`."""
    set_paused(db.ready_for(config), name, True)
    click.echo(f"{name} paused")


@schedule.command()
@click.argument("name")
@click.pass_obj
def resume(config: Settings, name: str) -> None:
    """Make runs of NAME again, from its next due time on (missed ones are not made up)."""
    resumed = set_paused(db.ready_for(config), name, False)
    click.echo(f"{name} resumed, next run {iso(resumed.next_run_at)}")


@schedule.command()
@click.argument("name")
@click.pass_obj
def remove(config: Settings, name: str) -> None:
    """Delete schedule NAME and its run history; the jobs it made stay."""
    jobs = remove_schedule(db.ready_for(config), name)
    click.echo(f"{name} removed ({jobs} job(s) it made are kept)")


@schedule.command("run")
@click.argument("name")
@click.pass_obj
def run_now(config: Settings, name: str) -> None:
    """Make one run of NAME now, under the same rules (exit 1 if it is skipped); prints the
    job id."""
    run = manual_run(db.ready_for(config), open_broker(config), name, config)
    if run.job_id is None:
        raise JobFailed(f"run of {name} {run.status}: {run.reason}")
    click.echo(run.job_id)


@click.command()
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between two reads of the schedules table.")
@click.option("--retention-interval", type=click.FloatRange(min=0.1), default=60.0,
              show_default=True, help="Seconds between two retention passes.")
@click.pass_obj
def beat(config: Settings, interval: float, retention_interval: float) -> None:
    """Make the runs of every schedule when they are due, until stopped (Ctrl-C or SIGTERM).

    Schedules added, paused or removed from the CLI take effect at the next tick; two beat
    processes never make the same run twice. Beat also runs the reaper, which re-queues
    the chunks of dead workers and tops up the queues' permits in Redis; the webhook
    sender, which delivers `dinfer-batch webhooks` events; and retention, which deletes
    expired uploads and results and, with DINFER_BATCH_RETENTION_DAYS, old jobs' requests
    and results. Example:

        dinfer-batch beat
    """
    from dinfer_batch.fleet.reaper import Reaper, Tenure, reap_interval
    from dinfer_batch.jobs import retention
    from dinfer_batch.webhooks.sender import Sender

    sessions = db.ready_for(config)
    broker = open_broker(config)
    try:
        broker.check()
    except ConnectionError as exc:
        raise UserError(broker_unreachable(exc, config.broker_url)) from exc
    sender = Sender(sessions, config.webhook_timeout, config.webhook_retry_seconds)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    click.echo(f"beat: reading schedules every {interval:g}s", err=True)
    # the reaper also runs here: dead workers' chunks come back even with no worker left
    holder = f"beat@{socket.gethostname()}/{os.getpid()}"
    Reaper(sessions, broker, config.worker_timeout).start(
        Tenure(holder, reap_interval(config.heartbeat_seconds), asks_here=True), stop)
    sender.start(stop)  # webhooks: never on a worker's or a submit's time
    retention.start(sessions, retention_interval, stop, config.retention_days)
    run_beat(sessions, broker, interval, stop, config)
