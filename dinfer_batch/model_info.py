"""What the service needs to know about a model before queueing work for it: that it
exists, its context length, its generation defaults (to check parameters with the engine's
own rules) and its tokenizer (to reject over-long prompts up front). The weights are only
loaded by workers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import engine_fields
from workers.engines import resolve_config


@dataclass(frozen=True)
class ModelInfo:
    path: str
    max_context: int
    tokenizer: Any = field(repr=False)

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts)["input_ids"]]

    def gen_length(self, params: dict[str, Any]) -> int:
        """The answer length these parameters give; ValueError (from the engine's own
        checks) when they are invalid together, e.g. a block_length that does not divide."""
        return _resolved(json.dumps(params, sort_keys=True), self.path).gen_length

    def samples_randomly(self, params: dict[str, Any]) -> bool:
        """Whether these parameters sample (temperature > 0, the model's default included),
        so that the seed matters; ValueError as for `gen_length`."""
        return _resolved(json.dumps(params, sort_keys=True), self.path).temperature > 0


@lru_cache(maxsize=1024)
def _resolved(params_json: str, model: str) -> Any:
    defaults = _json(Path(model) / "generation_config.json")
    return resolve_config(engine_fields(json.loads(params_json)), defaults)


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise UserError(f"model file {path} is not valid JSON ({exc})") from exc


def load_model_info(model: str) -> ModelInfo:
    directory = Path(model).expanduser().resolve()
    if not (directory / "config.json").is_file():
        raise UserError(
            f"unknown model {model!r}: {directory} is not a model directory (no config.json)"
        )
    config = _json(directory / "config.json")
    from engine.checkpoint import load_tokenizer

    try:
        tokenizer = load_tokenizer(directory)
    except ValueError as exc:
        raise UserError(f"model {model!r}: {exc}") from exc
    return ModelInfo(
        path=str(directory),
        max_context=int(config.get("max_sequence_length") or config.get(
            "max_position_embeddings") or 4096),
        tokenizer=tokenizer,
    )
