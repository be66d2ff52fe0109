"""A job's options, checked before anything is written: the model, the generation
defaults every line starts from, chunking. The CLI's options and the API's
`POST /v1/batches` body both end here."""

from __future__ import annotations

from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import InvalidParam, check_params
from dinfer_batch.jobs.expiry import window_seconds
from dinfer_batch.jobs.ingest import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage.tables import LOCAL_OWNER


def job_spec(model: str, params: dict[str, Any], *, queue: str, chunk_size: int,
             metadata: dict[str, str], owner: str = LOCAL_OWNER, endpoint: str | None = None,
             input_file_id: str | None = None,
             completion_window: str | None = None) -> JobSpec:
    """Check the options (UserError on anything wrong) and load what the model needs."""
    try:
        checked = check_params(params)
    except InvalidParam as exc:
        raise UserError(f"invalid option: {exc}") from exc
    if completion_window is not None:
        window_seconds(completion_window)
    info = load_model_info(model)
    try:
        answer = info.gen_length(checked)
    except ValueError as exc:
        raise UserError(f"invalid generation options: {exc}") from exc
    if answer >= info.max_context:  # else every line would fail alone as too long
        raise UserError(f"invalid generation options: an answer of {answer} tokens leaves no "
                        f"room for a prompt in the model's context of {info.max_context}")
    return JobSpec(model=info, queue=queue, chunk_size=chunk_size, params=checked,
                   metadata=metadata, owner=owner, endpoint=endpoint,
                   input_file_id=input_file_id, completion_window=completion_window)
