"""`dinfer-batch`: the command line. Every command lives in its own module; this one holds
the group and turns errors into one line and an exit code (0 ok, 1 job failed or output not written,
2 bad input or usage, or the database or broker unreachable)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from sqlalchemy.exc import InterfaceError, OperationalError

from dinfer_batch.cli.api import api, keys
from dinfer_batch.cli.db import db
from dinfer_batch.cli.fleet import queues, workers
from dinfer_batch.cli.jobs import cancel, list_, results, retry, status
from dinfer_batch.cli.model import model
from dinfer_batch.cli.options import flag
from dinfer_batch.cli.run import run
from dinfer_batch.cli.schedule import beat, schedule
from dinfer_batch.cli.submit import submit
from dinfer_batch.cli.webhooks import delete, webhooks
from dinfer_batch.cli.worker import worker
from dinfer_batch.config import FAMILY_NAMES, Settings
from dinfer_batch.errors import CannotWrite, JobFailed, OptionError, UserError
from dinfer_batch.redact import mask
from dinfer_batch.storage.db import unreachable


class Cli(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            _reader_left(ctx)
        except OptionError as exc:  # named as fields: the user typed flags
            _fail(ctx, f"error: {exc.naming(flag)}", 2)
        except UserError as exc:
            _fail(ctx, f"error: {exc}", 2)
        except (OperationalError, InterfaceError) as exc:  # the database went away mid-command
            _fail(ctx, f"error: {unreachable(ctx.obj.database_url, exc)}", 2)
        except JobFailed as exc:
            _fail(ctx, f"job failed: {exc}", 1)
        except CannotWrite as exc:
            _fail(ctx, f"error: {exc}", 1)
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            _fail(ctx, f"error: {type(exc).__name__}: {exc} (--debug shows the traceback)", 1)


def _reader_left(ctx: click.Context) -> None:
    """The reader of our output went away (`dinfer-batch results JOB | head`): stop quietly,
    as other command-line tools do. Standard output now points at /dev/null, so Python's
    final flush cannot raise again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    ctx.exit(0)


def _fail(ctx: click.Context, message: str, code: int) -> None:
    if ctx.params.get("debug"):
        import traceback

        traceback.print_exc()
    click.secho(mask(message), fg="red", err=True)  # no credential of a URL on a terminal
    ctx.exit(code)


# the families from the engine's registry (dinfer_engine/choices.py)
HELP = (f"Batch generation with diffusion language models ({', '.join(FAMILY_NAMES)}).\n"
        + """
    \b
    Quick start, all in one process (SQLite, the bundled demo model, no Redis):
      dinfer-batch run prompts.jsonl -o results.jsonl
    \b
    Service mode (Redis broker, Celery workers, SQL database):
      dinfer-batch db upgrade                 # once, for PostgreSQL
      dinfer-batch worker --gpus all          # a node: one replica per GPU
      dinfer-batch workers                    # the live workers
      dinfer-batch queues                     # what waits in each queue, by priority
      dinfer-batch submit prompts.jsonl       # prints the job id
      dinfer-batch status JOB --watch
      dinfer-batch results JOB -o results.jsonl --errors errors.jsonl
    \b
    OpenAI-compatible HTTP API (Files + Batches; the `openai` client works unchanged):
      dinfer-batch keys create alice          # prints the API key once
      dinfer-batch api --port 8000
    \b
    Recurring jobs (a template, its vars, n samples each, every night):
      dinfer-batch schedule add nightly --cron '0 2 * * *' --template T --vars V.jsonl --n 4
      dinfer-batch beat                       # makes the runs; each is an ordinary job
    \b
    What a model is and how it decodes by default: dinfer-batch model NAME
    \b
    Input lines: {"prompt": "..."}, {"messages": [...]} or OpenAI batch lines
    {"custom_id", "method": "POST", "url": "/v1/completions", "body": {...}}.
    Settings: DINFER_BATCH_DATABASE_URL (default: SQLite in the user data directory),
    DINFER_BATCH_BROKER_URL (default redis://localhost:6379/0), DINFER_BATCH_MODEL,
    DINFER_BATCH_MODEL_DIR (where model names are found), DINFER_BATCH_WORKER_TIMEOUT,
    DINFER_BATCH_DB_POOL_SIZE and DINFER_BATCH_DB_MAX_OVERFLOW (the database connections
    each process holds at most: 2 + 0 by default; docs/fleet.md).
    Exit codes: 0 ok; 1 the job failed, or its results could not be written; 2 bad input
    or usage, or the database or broker cannot be reached.
""")


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]}, help=HELP)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    # every setting now, handed to the command as its context's object: a bad one is a
    # usage error before any command starts
    ctx.obj = Settings.from_env(os.environ)


for command in (submit, status, results, list_, cancel, retry, run, worker, workers, queues,
                db, schedule, beat, api, keys, webhooks, delete, model):
    main.add_command(command)
