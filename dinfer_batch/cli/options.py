"""Options shared by `submit`, `run` and `schedule add`: the input (a file, or a template
and its vars), the model, the generation defaults (one option per generation field that
has a help: dinfer_engine/generation_fields.py), samples and seeds, chunking."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dinfer_batch.config import DEFAULT_CHUNK_SIZE, MODEL_HELP, Settings
from dinfer_batch.formats.lines.requests import URLS
from dinfer_batch.formats.parameters.params import MAX_SAMPLES
from dinfer_batch.jobs.create import PARAM_OPTIONS, job_spec
from dinfer_engine.fields import Field, Flag, Integer, OneOf
from dinfer_engine.generation_fields import FIELDS

__all__ = ["PARAM_OPTIONS", "flag", "input_options", "job_options", "job_spec",
           "result_options", "setting"]


def setting(name: str) -> Callable[[], Any]:
    """An option's default: the field `name` of the settings the command line's group read
    as it started (cli/app.py)."""
    return lambda: getattr(click.get_current_context().find_object(Settings), name)


def flag(field: str) -> str:
    """How the command line spells a job's field: the FILE argument, else its option
    (`prompt_column` -> `--prompt-column`)."""
    return "FILE" if field == "file" else "--" + field.replace("_", "-")


def input_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """FILE (JSONL or Parquet, with its columns), or --template and --vars."""
    options = [
        click.argument("file", type=click.Path(path_type=Path), required=False),
        click.option("--template", metavar="FILE|TEXT",
                     help="Prompt template instead of FILE: Python str.format fields, e.g. "
                          "'Write a {style} poem about {topic}.' ({{ and }} are literal "
                          "braces), or a file holding it. Needs --vars."),
        click.option("--vars", "vars_file", type=click.Path(path_type=Path), metavar="FILE",
                     help="JSONL, one JSON object of template variables per line; a line may "
                          "also carry custom_id and request parameters (n, seed, ...)."),
        click.option("--messages", is_flag=True,
                     help="Render the template as one user chat message, not a prompt."),
        click.option("--prompt-column", metavar="NAME",
                     help="FILE is a table (Parquet, or JSONL objects): column NAME holds "
                          "the prompt. A .parquet FILE without it uses its 'prompt' or "
                          "'messages' column. Columns named as parameters (max_tokens, n, "
                          "seed, ...) apply to the row; the others come back as the "
                          "result's metadata."),
        click.option("--messages-column", metavar="NAME",
                     help="As --prompt-column, for a column of chat messages "
                          "([{role, content}, ...])."),
        click.option("--id-column", metavar="NAME",
                     help="The table's column of request ids (default: custom_id, if any; "
                          "else line-<row>)."),
    ]
    return _stacked(command, options)


def _read_schema(context: click.Context, param: click.Parameter, value: str | None) -> Any:
    """--json-schema FILE: the schema itself (a schedule stores it, so every run keeps it)."""
    if value is None:
        return None
    try:
        return json.loads(Path(value).expanduser().read_text())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value}: {exc.strerror}") from exc
    except ValueError as exc:
        raise click.BadParameter(f"{value} is not JSON: {exc}") from exc


def field_option(field: Field) -> Callable[..., Any]:
    """A generation field's option, from its row: --name (the service's spelling), typed
    by its check, with its help."""
    name, check = flag(field.service_name), field.check
    if isinstance(check, Flag):
        return click.option(f"{name}/--no-{name[2:]}", default=None, help=field.help)
    kind: Any = click.Choice(list(check.choices)) if isinstance(check, OneOf) \
        else int if isinstance(check, Integer) else float
    return click.option(name, type=kind, help=field.help)


def job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--model", default=setting("default_model"), show_default="demo",
                     help=MODEL_HELP),
        *(field_option(field) for field in FIELDS.values() if field.help),
        click.option("--n", "n", type=int,
                     help=f"Samples per request (1-{MAX_SAMPLES}), returned as the choices of "
                          "one output line; a line's own \"n\" overrides it."),
        click.option("--seed-base", type=click.IntRange(0, 2**62), default=0, show_default=True,
                     help="Seeds of lines without one: line L's sample i uses "
                          "seed-base + 128 L + i (distinct for every sample of every line)."),
        click.option("--json-schema", "json_schema", metavar="FILE", callback=_read_schema,
                     help="Every answer is JSON that validates against the JSON schema in "
                          "FILE, valid by construction (docs/structured-outputs.md); a "
                          "line's own response_format / structured_outputs overrides it."),
        click.option("--regex", metavar="PATTERN",
                     help="Every answer matches this regular expression in full."),
        click.option("--choice", metavar="A,B,...",
                     help="Every answer is exactly one of these comma-separated strings."),
        click.option("--endpoint", type=click.Choice(list(URLS)),
                     help="The batch's endpoint, as OpenAI's batches have one: lines without "
                          "a url take it (Mistral's batch lines), lines of another fail. "
                          "Default: each line's url, else chat for a body with messages, "
                          "completions for one with a prompt."),
        click.option("--strict-model", is_flag=True,
                     help="Fail each line whose body names another model than --model "
                          "(default: run it on --model and count it in the job's notes)."),
        click.option("--chunk-size", type=click.IntRange(min=1), default=DEFAULT_CHUNK_SIZE,
                     show_default=True,
                     help="Generations per queued chunk (each line at its cost: n x infill "
                          "candidates x editing post-steps; docs/service.md)."),
        click.option("--metadata", multiple=True, metavar="KEY=VALUE",
                     help="Attach metadata to the job (repeatable)."),
        click.option("--priority", default="normal", show_default=True, metavar="LEVEL",
                     help="low, normal, high, or an integer (-1000..1000): a queue serves "
                          "higher priorities strictly first, and shares each priority "
                          "fairly across owners and their jobs."),
    ]
    return _stacked(command, options)


OUTPUT_FILE = click.Path(path_type=Path, dir_okay=False)
FORMAT_HELP = ("parquet: one row per request (custom_id, status, text, texts, finish_reason, "
               "token counts, error_code, error_message, metadata) in the file -o names, "
               "for pandas or datasets.load_dataset('parquet', ...); failures are rows too.")
PER_SAMPLE_HELP = ("One line per sample (custom_id <custom_id>-s<i>, one choice) instead of "
                   "one line per request with n choices.")


def in_existing_directory(_ctx: click.Context, _param: click.Parameter,
                          path: Path | None) -> Path | None:
    """Refuse an output file that could not be created before the work, not after it."""
    if path is not None and not path.parent.is_dir():
        raise click.BadParameter(f"directory {path.parent} does not exist")
    return path


def result_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """-o, --errors, --per-sample and --format: where and how results are written."""
    options = [
        click.option("-o", "--output", type=OUTPUT_FILE, callback=in_existing_directory,
                     help="Write results here instead of standard output."),
        click.option("--errors", type=OUTPUT_FILE, callback=in_existing_directory,
                     help="Write failed requests here (and only successes to --output)."),
        click.option("--per-sample", is_flag=True, help=PER_SAMPLE_HELP),
        click.option("--format", "format_", type=click.Choice(["jsonl", "parquet"]),
                     default="jsonl", show_default=True, help=FORMAT_HELP),
    ]
    return _stacked(command, options)


def _stacked(command: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    """`command` with `options` applied as decorators, listed in --help in this order."""
    for option in reversed(options):
        command = option(command)
    return command
