"""What a new job asks for, besides its input file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dinfer_batch.model_info import ModelInfo
from dinfer_batch.storage.tables import LOCAL_OWNER


@dataclass(frozen=True)
class JobSpec:
    """What `submit`, `run` and `POST /v1/batches` ask for, besides the file. `endpoint`
    (an OpenAI batch's) makes lines of the other kind fail; `completion_window` ("24h")
    sets when the job expires."""

    model: ModelInfo
    queue: str
    chunk_size: int
    params: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    seed_base: int = 0  # unseeded line L: sample i uses seed seed_base + 128 L + i
    owner: str = LOCAL_OWNER
    endpoint: str | None = None
    input_file_id: str | None = None
    completion_window: str | None = None
    strict_model: bool = False  # a line naming another model fails instead of running
