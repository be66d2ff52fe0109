"""Options shared by `submit`, `run` and `schedule add`: the input (a file, or a template
and its vars), the model, the generation defaults, samples and seeds, chunking."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dinfer_batch.config import DEFAULT_CHUNK_SIZE, MODEL_HELP, settings
from dinfer_batch.formats.params import MAX_SAMPLES
from dinfer_batch.jobs.create import PARAM_OPTIONS, job_spec
from dinfer_engine import choices

__all__ = ["PARAM_OPTIONS", "flag", "input_options", "job_options", "job_spec",
           "result_options"]


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


def job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--model", default=lambda: settings().default_model, show_default="demo",
                     help=MODEL_HELP),
        click.option("--max-tokens", type=int, help="Answer length in tokens (gen_length)."),
        click.option("--block-length", type=int, help="Tokens per diffusion block."),
        click.option("--steps", type=int, help="Denoising steps for the whole answer."),
        click.option("--decoder", type=click.Choice(list(choices.DECODERS)),
                     help="Which tokens to commit."),
        click.option("--threshold", type=float,
                     help="Confidence for --decoder threshold, hierarchical, credit; for "
                          "editing, the confidence that turns a mask into a token."),
        click.option("--preset", type=click.Choice(list(choices.PRESETS)),
                     help="LLaDA2.1's decoding modes: the editing decoder with a low mask "
                          "threshold and full editing (speed: threshold 0.5, "
                          "editing-threshold 0), or conservative ones (quality: 0.7, 0.5); "
                          "options given beside it win."),
        click.option("--editing-threshold", type=float,
                     help="--decoder editing: rewrite a placed token when the model is more "
                          "sure than this of another."),
        click.option("--max-post-steps", type=int,
                     help="--decoder editing: most forwards over a block with no mask left."),
        click.option("--num-to-transfer", type=int,
                     help="--decoder editing: fewest masks filled per step."),
        click.option("--low-threshold", type=float,
                     help="Per-run confidence for --decoder hierarchical."),
        click.option("--temperature", type=float, help="0 is greedy."),
        click.option("--n", "n", type=int,
                     help=f"Samples per request (1-{MAX_SAMPLES}), returned as the choices of "
                          "one output line; a line's own \"n\" overrides it."),
        click.option("--seed", type=int,
                     help="One seed for every line that has none (sample i uses seed + i). "
                          "Unset: line L uses --seed-base + 128 L."),
        click.option("--seed-base", type=click.IntRange(0, 2**62), default=0, show_default=True,
                     help="Seeds of lines without one: line L's sample i uses "
                          "seed-base + 128 L + i (distinct for every sample of every line)."),
        click.option("--cache", type=click.Choice(list(choices.CACHES)), help="KV cache mode."),
        click.option("--prefix-look", type=int,
                     help="Columns before the block recomputed by --cache vicinity."),
        click.option("--after-look", type=int,
                     help="Columns after the block recomputed by --cache vicinity."),
        click.option("--warmup-steps", type=int,
                     help="Full forwards first, for --cache vicinity."),
        click.option("--smoothing/--no-smoothing", default=None,
                     help="dInfer's iteration smoothing."),
        click.option("--cont-weight", type=float, help="Smoothing weight cap."),
        click.option("--max-denoising-steps", type=int,
                     help="DiffusionGemma: most denoising steps per canvas."),
        click.option("--entropy-bound", type=float,
                     help="DiffusionGemma: accept the lowest-entropy samples within this."),
        click.option("--t-min", type=float,
                     help="DiffusionGemma: temperature at the last denoising step."),
        click.option("--t-max", type=float,
                     help="DiffusionGemma: temperature at the first denoising step."),
        click.option("--stability-threshold", type=int,
                     help="DiffusionGemma: steps the argmax canvas must stay the same to stop."),
        click.option("--confidence-threshold", type=float,
                     help="DiffusionGemma: mean entropy below which a stable canvas stops."),
        click.option("--json-schema", "json_schema", metavar="FILE", callback=_read_schema,
                     help="Every answer is JSON that validates against the JSON schema in "
                          "FILE, valid by construction (docs/structured-outputs.md); a "
                          "line's own response_format / structured_outputs overrides it."),
        click.option("--regex", metavar="PATTERN",
                     help="Every answer matches this regular expression in full."),
        click.option("--choice", metavar="A,B,...",
                     help="Every answer is exactly one of these comma-separated strings."),
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
