"""What a new job asks for, besides its input file; what its owner may ask for; job
priorities."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.model_info import ModelInfo
from dinfer_batch.storage.tables import LOCAL_OWNER

PRIORITIES = {"low": -1, "normal": 0, "high": 1}
MAX_PRIORITY = 1000


def parse_priority(value: str | int | None) -> int:
    """`low`, `normal` (the default), `high`, or an integer from -1000 to 1000; higher
    runs strictly first."""
    if value is None:
        return PRIORITIES["normal"]
    if isinstance(value, str) and value.strip().lower() in PRIORITIES:
        return PRIORITIES[value.strip().lower()]
    try:
        number = int(value) if not isinstance(value, bool | float) else None
    except ValueError:
        number = None
    if number is None or abs(number) > MAX_PRIORITY:
        raise UserError(f"priority must be low, normal, high or an integer from "
                        f"-{MAX_PRIORITY} to {MAX_PRIORITY}, got {value!r}")
    return number


def priority_name(priority: int) -> str:
    """`high` for 1, `7` for 7."""
    return next((name for name, value in PRIORITIES.items() if value == priority),
                str(priority))


@dataclass(frozen=True)
class Entitlements:
    """What an owner's batches may ask of the fleet (jobs/intake/entitlements.py); None: no
    ceiling. The default is the operator's (the CLI, schedules): no ceiling at all."""

    max_priority: int = MAX_PRIORITY
    max_chunk_size: int | None = None
    max_request_tokens: int | None = None
    max_batch_requests: int | None = None


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What `submit`, `run` and `POST /v1/batches` ask for, besides the model, the
    generation parameters and the file. `endpoint` (an OpenAI batch's) makes lines of the
    other kind fail; `completion_window` ("24h") sets when the job expires."""

    queue: str
    chunk_size: int
    metadata: dict[str, str] = field(default_factory=dict)
    seed_base: int = 0  # unseeded line L: sample i uses seed seed_base + 128 L + i
    owner: str = LOCAL_OWNER
    endpoint: str | None = None
    input_file_id: str | None = None
    completion_window: str | None = None
    strict_model: bool = False  # a line naming another model fails instead of running
    priority: int = 0
    entitled: Entitlements = Entitlements()  # the API's batches: their key's


@dataclass(frozen=True, kw_only=True)
class JobSpec(JobOptions):
    """A job's options with its model loaded and its parameters checked
    (jobs/create.make_spec): what ingest makes the job from."""

    model: ModelInfo
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, options: JobOptions, model: ModelInfo, params: dict[str, Any]) -> JobSpec:
        return cls(model=model, params=params,
                   **{f.name: getattr(options, f.name) for f in fields(JobOptions)})
