"""`dinfer-batch worker`: a node's workers (a supervisor of replicas, or one worker process)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import click

from dinfer_batch.cli.options import setting
from dinfer_batch.config import MODEL_HELP, Settings
from dinfer_batch.errors import UserError
from dinfer_batch.model_info import load_model_info
from dinfer_workers.logs import LEVELS as LOG_LEVELS


@click.command()
@click.option("--model", default=setting("default_model"), show_default="demo",
              help="Model to load as soon as the worker is ready (a job's own model loads "
                   "when its first chunk arrives). " + MODEL_HELP)
@click.option("--gpus", help="Supervise one replica per GPU group on these GPUs: all, 0-7, "
                             "0,1,2 (indices into the visible GPUs).")
@click.option("--gpus-per-replica", type=click.IntRange(min=1), default=1, show_default=True,
              help="Consecutive GPUs each replica gets, the model tensor-parallel over "
                   "them (for models larger than one GPU).")
@click.option("--tensor-parallel", type=click.IntRange(min=1),
              help="Ranks of each replica (one process each), the model split across them: "
                   "with --device cpu (gloo), or cuda:N and the next GPUs. With --gpus it "
                   "is --gpus-per-replica.")
@click.option("--replicas", type=click.IntRange(min=1),
              help="Supervise this many CPU replicas (with --device cpu).")
@click.option("--device", default="cpu", show_default=True,
              help="cpu, cuda or cuda:N, for a single worker process.")
@click.option("--queues", default=setting("default_queue"), show_default="dinfer_batch",
              help="Comma-separated queues to take chunks from.")
@click.option("--dry-run", is_flag=True, help="Print the plan (one JSON object per replica: "
                                              "name, env, command) and exit.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True,
              help="info: one line per chunk (job, chunk, items, tokens/s) and every fault; "
                   "debug adds Celery's own messages (kept at warning otherwise).")
@click.option("--log-file", type=click.Path(path_type=Path, dir_okay=False),
              help="Append the log of this process and its replicas to FILE instead of "
                   "the terminal.")
@click.option("--name", hidden=True, help="This process's worker name (set by the supervisor).")
@click.pass_context
def worker(ctx: click.Context, model: str, gpus: str | None, gpus_per_replica: int,
           tensor_parallel: int | None, replicas: int | None, device: str, queues: str,
           dry_run: bool, log_level: str, log_file: Path | None, name: str | None) -> None:
    """Run a node's workers: one process per model replica, one chunk at a time each.

    With --gpus or --replicas this is the node's supervisor: it starts one replica per
    GPU group (pinned with CUDA_VISIBLE_DEVICES) or per CPU replica, restarts those that
    die, and on Ctrl-C/SIGTERM stops them warm (each chunk in hand keeps its finished
    results and goes back to the queue at once). Without them it is one worker process.
    A replica of N ranks (--gpus-per-replica N, or --tensor-parallel N) is one worker with
    one heartbeat; a rank that dies takes the replica down and it restarts as a whole.
    Workers heartbeat into the database; `dinfer-batch workers` lists them. An engine call
    still running after DINFER_BATCH_CHUNK_TIMEOUT seconds (default 1800) counts as hung:
    its chunk is queued again and the replica restarts itself. A replica holds at most
    DINFER_BATCH_DB_POOL_SIZE + DB_MAX_OVERFLOW (2 + 0) database connections. Examples:

    \b
        dinfer-batch worker --gpus all --model LLaDA-8B-Instruct
        dinfer-batch worker --gpus 0-7 --gpus-per-replica 2
        dinfer-batch worker --replicas 3 --device cpu
        dinfer-batch worker --replicas 1 --device cpu --tensor-parallel 2
    """
    from dinfer_workers.supervisor import Supervisor, parse_gpus, plan, visible_gpus

    queue_list = [q for q in queues.split(",") if q]
    if not queue_list:
        raise click.BadParameter(f"no queue in {queues!r}", param_hint="--queues")
    _check_placement(gpus, replicas, device, tensor_parallel, gpus_per_replica)
    if log_file is not None:
        _log_to(log_file)
    ranks = gpus_per_replica if gpus else tensor_parallel or 1
    config: Settings = ctx.obj
    info = load_model_info(model, config.model_dir)  # a wrong --model is refused now
    try:
        # a dry run plans the indices as given (for this machine or another), but `all`
        visible = visible_gpus() if gpus == "all" or not dry_run else []
        gpu_ids = parse_gpus(gpus, visible) if gpus else None
        replicas_plan = plan(model, info.name, ",".join(queue_list), gpu_ids,
                             gpus_per_replica, replicas or 1, ranks, log_level)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    if ranks > 1:  # a model that does not split is refused too (on the meta device)
        _check_splits(model, Path(info.path), ranks)
    if dry_run:
        for replica in replicas_plan:
            click.echo(json.dumps({"name": replica.name, "env": replica.env,
                                   "command": replica.command, "devices": replica.devices,
                                   "tensor_parallel": len(replica.devices)}))
        return
    if name is None and os.geteuid() == 0:  # once, in the process the user started
        click.secho("warning: running as root; a worker needs no privileges, so run it as "
                    "an ordinary user where you can", fg="yellow", err=True)
    if gpus or replicas:
        ctx.exit(Supervisor(replicas_plan).run())
    from dinfer_batch.fleet.replica import run_replica
    from dinfer_workers.launcher import pin_device

    pinned = pin_device(device, ranks)
    run_replica(config, info, pinned, queue_list, name or _single_name(device, info.name),
                requested=device, tensor_parallel=ranks, log_level=log_level)


def _log_to(path: Path) -> None:
    """Point this process's stdout and stderr (and so its replicas') at `path`, appended."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise click.BadParameter(f"cannot open {path}: {exc.strerror}",
                                 param_hint="--log-file") from exc
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(fd, stream.fileno())
    os.close(fd)


def _single_name(device: str, model_name: str) -> str:
    tag = "cpu" if device == "cpu" else "gpu" + device.partition(":")[2]
    return f"{tag}-{model_name.rstrip('/').rsplit('/', 1)[-1]}@{socket.gethostname()}"


def _check_placement(gpus: str | None, replicas: int | None, device: str,
                     tensor_parallel: int | None, gpus_per_replica: int) -> None:
    """The options that say where replicas run agree with each other."""
    if gpus and replicas:
        raise UserError("use --gpus (GPU replicas) or --replicas (CPU replicas), not both")
    if replicas and device != "cpu":
        raise UserError("--replicas starts CPU replicas (--device cpu); use --gpus for GPUs")
    if gpus and tensor_parallel not in (None, gpus_per_replica):
        raise UserError(f"with --gpus each replica is tensor-parallel over its "
                        f"--gpus-per-replica {gpus_per_replica} GPU(s); drop --tensor-parallel")


def _check_splits(model: str, path: Path, ranks: int) -> None:
    """The checkpoint splits over `ranks` tensor-parallel ranks."""
    from dinfer_engine.loading.checkpoint import check_tensor_parallel

    try:
        check_tensor_parallel(path, ranks)
    except ValueError as exc:
        raise UserError(f"--model {model}: {exc}") from exc
