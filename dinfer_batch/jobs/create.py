"""Making a job from what a user asks for, without the command line: check the options into
a JobSpec, name the input (a JSONL file, or a template and its vars file), ingest it and
queue its chunks. `submit`, `run`, the scheduler and the HTTP API all come through here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.errors import OptionError, Unavailable, UserError
from dinfer_batch.formats.limits import BadValue, InvalidParam, check_metadata, unstorable
from dinfer_batch.formats.lines.columns import Columns, LineParser
from dinfer_batch.formats.lines.template import load_template
from dinfer_batch.formats.parameters.compat import in_user_names
from dinfer_batch.formats.parameters.params import check_params
from dinfer_batch.formats.parameters.structured import option_spec
from dinfer_batch.jobs.expiry import window_seconds
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.intake.parquet_input import column_names, is_parquet
from dinfer_batch.jobs.running.dispatch import top_up
from dinfer_batch.jobs.spec import JobOptions, JobSpec, parse_priority
from dinfer_batch.model_info import load_model_info
from dinfer_batch.redact import mask
from dinfer_batch.storage.tables import Job
from dinfer_engine.generation_fields import FIELDS

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

# the parameters a job's options may set: the generation fields the command line offers
# (those with a help in dinfer_engine/generation_fields.py), and the samples
PARAM_OPTIONS = (*(field.service_name for field in FIELDS.values() if field.help), "n")


def job_spec(options: dict[str, Any], queue: str, model_dir: Path) -> JobSpec:
    """A job from options as the command line and stored schedules hold them: `options`
    holds `model`, `chunk_size`, `metadata` (KEY=VALUE strings), the parameters of
    PARAM_OPTIONS (None when unset) and optionally `seed_base`, `strict_model`,
    `endpoint` and `priority` (low, normal, high or an integer), and `json_schema` (a
    schema, already read), `regex`, `choice`."""
    try:
        structured = option_spec(options.get("json_schema"), options.get("regex"),
                                 options.get("choice"))
    except InvalidParam as exc:
        raise UserError(f"invalid option: {exc}") from exc
    params = {name: options.get(name) for name in PARAM_OPTIONS} | {"structured": structured}
    return make_spec(options["model"], params, JobOptions(
        queue=queue, chunk_size=options["chunk_size"],
        metadata=parse_metadata(options["metadata"]), seed_base=options.get("seed_base") or 0,
        strict_model=bool(options.get("strict_model")),
        priority=parse_priority(options.get("priority")),
        endpoint=options.get("endpoint")), model_dir)


def make_spec(model: str, params: dict[str, Any], options: JobOptions,
              model_dir: Path) -> JobSpec:
    """Check the parameters and options (UserError on anything wrong) and load what the
    model needs (a name under `model_dir`, or a path). The HTTP API's batches come here
    directly, with their owner, endpoint and window."""
    try:
        checked = check_params(params)
    except InvalidParam as exc:
        raise UserError(f"invalid option: {exc}") from exc
    if (found := unstorable(checked)) is not None:
        raise UserError(f"invalid option: {found}")
    if options.completion_window is not None:
        window_seconds(options.completion_window)
    try:
        check_metadata(options.metadata)
    except BadValue as exc:
        raise UserError(f"invalid metadata: {exc}") from exc
    info = load_model_info(model, model_dir)
    try:
        answer = info.gen_length(checked)
    except ValueError as exc:
        raise UserError(f"invalid generation options: {in_user_names(str(exc), {})}") from exc
    if answer >= info.max_context:  # else every line would fail alone as too long
        raise UserError(f"invalid generation options: an answer of {answer} tokens leaves no "
                        f"room for a prompt in the model's context of {info.max_context}")
    return JobSpec.of(options, info, checked)


def input_columns(options: dict[str, Any]) -> Columns | None:
    """The table columns `options` name (`prompt_column`, `messages_column`, `id_column`,
    popped from it): None when they name no text column."""
    prompt, messages = options.pop("prompt_column", None), options.pop("messages_column", None)
    custom_id = options.pop("id_column", None) or "custom_id"
    if prompt and messages:
        raise OptionError("give {prompt_column} or {messages_column}, not both")
    if not (prompt or messages):
        if custom_id != "custom_id":
            raise OptionError("{id_column} goes with {prompt_column} or {messages_column}")
        return None
    return Columns(prompt or messages, bool(messages), custom_id)


def parse_metadata(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OptionError("{metadata} takes KEY=VALUE, got {pair}", pair=repr(pair))
        metadata[key] = value
    return metadata


def job_input(file: Path | None, template: str | None, vars_file: Path | None,
              messages: bool = False, columns: Columns | None = None
              ) -> tuple[Path, LineParser | None]:
    """The file to read and what makes its lines requests: a template to render them
    with, the columns of a table (a Parquet file, or JSONL objects, with `columns`), or
    None (request lines; a Parquet file's `prompt` or `messages` column)."""
    if columns is not None:
        if template is not None or vars_file is not None or file is None:
            raise OptionError("{prompt_column} and {messages_column} go with {file}, not "
                              "{template}")
        if file.is_file() and is_parquet(file):
            columns.check(column_names(file))
        return file, columns
    if template is None and vars_file is None:
        if file is None:
            raise OptionError("give a JSONL or Parquet file of requests, or {template} and "
                              "{vars}")
        if messages:
            raise OptionError("{messages} goes with {template}")
        return file, None
    if file is not None:
        raise OptionError("give either a file of requests ({path}) or {template} and {vars}, "
                          "not both", path=str(file))
    if template is None or vars_file is None:
        raise OptionError("{template} and {vars} go together")
    return vars_file, load_template(template, messages)


def broker_unreachable(exc: ConnectionError, url: str) -> str:
    """The message for the broker at `url` that cannot be reached, its password masked."""
    return (f"{mask(str(exc))} at {mask(url)} (is Redis running? set "
            "DINFER_BATCH_BROKER_URL)")


def create_job(sessions: sessionmaker[Session], broker: Broker, path: Path, spec: JobSpec,
               config: Settings, template: LineParser | None = None,
               processes: int = 0) -> Job:
    """Ingest the input into a job (`config`, `processes`: see `ingest`) and top up its queue's
    permits on `broker` (the one made from `config` by the caller's entry) for the
    workers; Unavailable when the broker cannot be reached (checked first, so nothing is
    written then)."""
    try:
        broker.check()
    except ConnectionError as exc:
        raise Unavailable(broker_unreachable(exc, config.broker_url)) from exc
    job = ingest(sessions, path, spec, config, template, processes)
    if job.chunk_count:
        top_up(sessions, broker, job.queue, config.worker_timeout)
    return job
