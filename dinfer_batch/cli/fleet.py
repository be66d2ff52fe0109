"""`dinfer-batch workers` (the live and recently dead or stopped workers) and
`dinfer-batch queues` (what waits in each queue, and who serves it)."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

from dinfer_batch.cli.broker import open_broker
from dinfer_batch.config import Settings
from dinfer_batch.jobs.running.dispatch import queue_summaries
from dinfer_batch.storage import db
from dinfer_batch.storage.registry import recent_workers, state_of
from dinfer_batch.storage.tables import Worker

FIELDS = ("id", "name", "host", "pid", "model", "device", "queues", "job_id", "chunk_id",
          "items_done", "tokens_per_s", "prefix_tokens_reused", "started_at", "heartbeat_at",
          "stopped_at")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One worker object per line.")
@click.pass_obj
def workers(config: Settings, as_json: bool) -> None:
    """List workers: live ones, and those dead or stopped within the last hour.

    A worker is live while its heartbeat (every few seconds) is younger than
    DINFER_BATCH_WORKER_TIMEOUT (default 60 s); the chunks of a dead worker go back to
    the queue. Example:

        dinfer-batch workers --json
    """
    rows = recent_workers(db.ready_for(config))
    now = time.time()
    states = [state_of(worker, config.worker_timeout, now) for worker in rows]
    if as_json:
        for worker, state in zip(rows, states, strict=True):
            click.echo(json.dumps(_object(worker, state)))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")  # 80 columns: --json has all
    for column in ("name", "state", "pid", "device", "job/chunk", "items", "tok/s", "beat"):
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for worker, state in zip(rows, states, strict=True):
        doing = f"{worker.job_id[:14]}…/{worker.chunk_id}" if worker.job_id else "-"
        table.add_row(worker.name, state, str(worker.pid), worker.device,
                      doing, str(worker.items_done), f"{worker.tokens_per_s:.0f}",
                      f"{now - worker.heartbeat_at:.0f}s ago")
    Console().print(table if rows else "no worker has heartbeated in the last hour")


def _object(worker: Worker, state: str) -> dict:
    return {name: getattr(worker, name) for name in FIELDS} | {"state": state}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One queue object per line.")
@click.pass_obj
def queues(config: Settings, as_json: bool) -> None:
    """Show each queue: its jobs waiting and running by priority, their owners, the chunks
    queued and running, the permits waiting in Redis (a window of one per live worker) and
    the live workers. A queue serves higher priorities strictly first and shares each
    priority fairly across owners, then across each owner's jobs. Example:

        dinfer-batch queues --json
    """
    summaries = queue_summaries(db.ready_for(config), open_broker(config),
                                config.worker_timeout)
    if as_json:
        for summary in summaries:
            click.echo(json.dumps(summary))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("queue", "jobs waiting/running by priority", "owners", "chunks q/r",
                   "in Redis", "workers"):
        table.add_column(column, overflow="fold")
    for summary in summaries:
        jobs = ", ".join(f"{name} {counts['waiting']}/{counts['running']}"
                         for name, counts in summary["jobs"].items()) or "-"
        table.add_row(summary["queue"], jobs, ", ".join(summary["owners"]) or "-",
                      f"{summary['queued_chunks']}/{summary['running_chunks']}",
                      str(summary["permits_in_redis"]), str(summary["live_workers"]))
    Console().print(table if summaries else "no queue has jobs in progress or live workers")
